// Package bytepool keeps the byte slices a finished job gave back, by
// length, for the next job to take cleared (or, for a job that overwrites
// them whole before reading, as they are): bounded, shared across
// goroutines, and deterministic (unlike sync.Pool, whose items the garbage
// collector and the race detector drop at will, what is put back is there to
// be taken).
//
// The simulator uses it for the bytes of a run's memory regions and its
// network's frame buffers: a search or a sweep runs thousands of seeds one
// after another in one process, and bytes allocated afresh per run, though
// they hold no pointers, would set the garbage collector's pace.
package bytepool
