package sim

import (
	"crypto/sha256"
	"hash"
	"io"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/sim/netsim"
)

// recKind is what an event-log record is.
type recKind uint8

const (
	recDeliver recKind = iota // a frame arrived at the far end of a link
	recDrop                   // a frame was dropped
	recCut                    // a link was cut
	recHeal                   // a link was healed
	recText                   // a workload line, formatted already
)

// Record flags.
const (
	recBTH       uint8 = 1 << iota // op, qpn and psn hold the frame's BTH fields
	recDup                         // the second copy of a duplicated frame
	recReordered                   // delayed by the fault model's reordering
	recCorrupt                     // bits flipped on the way
)

// traceRec is one line of the event log as the simulation loop takes it
// down: a network event's fields, or a workload line's place in its batch's
// text.
type traceRec struct {
	at    netsim.Time
	pipe  *netsim.Pipe
	sum   uint32
	n     int32 // frame length
	qpn   uint32
	psn   uint32
	start int32 // recText: the line (without time) is text[start:end]
	end   int32
	kind  recKind
	op    packet.Opcode
	flags uint8
	cause netsim.DropCause
}

// traceBatch is records on their way from the loop to the writer.
type traceBatch struct {
	recs []traceRec
	text []byte
}

// Batches: how many records or text bytes fill one, and how many exist (the
// loop waits for the writer when all are in its hands). On one core the
// writer runs when the loop waits, so every batch is written before any is
// read: at 2,048 records (130 KiB with text) the batches were half a
// megabyte that had left the caches by then; at 512 they stay in the
// second-level cache (scale: -2% in instructions and cache misses under
// cachegrind; 256 and 1,024 measured worse).
const (
	batchRecs = 512
	batchText = 8 << 10
	batchPool = 4
)

// flushAt is how many bytes of log lines the writer gathers before it hashes
// them (and writes them to the log): hashing lines one by one costs more
// than the hashing itself. The digest does not depend on how the log is cut
// into writes.
const flushAt = 16 << 10

// traceWriter turns records into the event log's lines, hashes them and
// writes them to the log, on a goroutine started by the first batch.
type traceWriter struct {
	todo    chan traceJob
	free    chan *traceBatch
	done    chan struct{}
	started bool
	hash    hash.Hash
	log     io.Writer
	buf     []byte
	err     error // the log's; read after done
}

func newTraceWriter(log io.Writer) *traceWriter {
	return &traceWriter{
		todo: make(chan traceJob, batchPool), free: make(chan *traceBatch, batchPool), done: make(chan struct{}),
		hash: sha256.New(), log: log, buf: make([]byte, 0, flushAt+512),
	}
}

// traceJob is what the writer is sent: a batch, or a window's batches of
// every shard of a sharded run, each shard's in order.
type traceJob struct {
	one    *traceBatch
	shards [][]*traceBatch
}

// send hands b to the writer goroutine, starting it if need be.
func (w *traceWriter) send(b *traceBatch) { w.sendJob(traceJob{one: b}) }

func (w *traceWriter) sendJob(j traceJob) {
	if !w.started {
		w.started = true
		go w.run()
	}
	w.todo <- j
}

// close waits for the writer to finish what it was sent and returns the
// log's error, if any.
func (w *traceWriter) close() error {
	if !w.started {
		w.flush()
		return w.err
	}
	close(w.todo)
	<-w.done
	return w.err
}

func (w *traceWriter) run() {
	defer close(w.done)
	for j := range w.todo {
		w.do(j)
	}
	w.flush()
}

// do writes a job's lines.
func (w *traceWriter) do(j traceJob) {
	if b := j.one; b != nil {
		for i := range b.recs {
			w.line(&b.recs[i], b.text)
		}
		w.recycle(b)
		return
	}
	w.merge(j.shards)
}

func (w *traceWriter) line(x *traceRec, text []byte) {
	w.buf = x.appendLine(w.buf, text)
	if len(w.buf) >= flushAt {
		w.flush()
	}
}

// recycle returns a batch for the recorders to fill again (or, past those
// the pool holds, to the batches of later runs).
func (w *traceWriter) recycle(b *traceBatch) {
	b.recs, b.text = b.recs[:0], b.text[:0]
	select {
	case w.free <- b:
	default:
		batches.Put(b)
	}
}

// merge writes a window's lines of every shard in order of time, the
// earlier shard's first where times tie: each shard's records are in the
// order its loop ran them, which never goes back in time.
func (w *traceWriter) merge(shards [][]*traceBatch) {
	type cursor struct {
		bs   []*traceBatch
		b, i int
	}
	cs := make([]cursor, 0, len(shards))
	for _, bs := range shards {
		if len(bs) > 0 {
			cs = append(cs, cursor{bs: bs})
		}
	}
	for len(cs) > 0 {
		best := 0
		for k := 1; k < len(cs); k++ {
			if cs[k].bs[cs[k].b].recs[cs[k].i].at < cs[best].bs[cs[best].b].recs[cs[best].i].at {
				best = k
			}
		}
		c := &cs[best]
		b := c.bs[c.b]
		// Take this shard's lines up to the next shard's: those before
		// the others' heads (or at their time, for a head of a later
		// shard).
		limit := netsim.Never
		for k := range cs {
			if k != best {
				at := cs[k].bs[cs[k].b].recs[cs[k].i].at
				if k > best {
					at++
				}
				limit = min(limit, at)
			}
		}
		j := c.i
		for j < len(b.recs) && b.recs[j].at < limit {
			w.line(&b.recs[j], b.text)
			j++
		}
		c.i = j
		if c.i == len(b.recs) {
			c.b, c.i = c.b+1, 0
			if c.b == len(c.bs) {
				cs = append(cs[:best], cs[best+1:]...)
			}
		}
	}
	for _, bs := range shards {
		for _, b := range bs {
			w.recycle(b)
		}
	}
}

// flush hashes (and writes to the log) the lines gathered so far.
func (w *traceWriter) flush() {
	w.hash.Write(w.buf)
	if w.log != nil && w.err == nil {
		_, w.err = w.log.Write(w.buf)
	}
	w.buf = w.buf[:0]
}

// appendLine appends x's line, newline included.
func (x *traceRec) appendLine(b, text []byte) []byte {
	b = appendInt(b, int64(x.at))
	b = append(b, ' ')
	switch x.kind {
	case recText:
		b = append(b, text[x.start:x.end]...)
		return append(b, '\n')
	case recCut, recHeal:
		if x.kind == recCut {
			b = append(b, "cut "...)
		} else {
			b = append(b, "heal "...)
		}
		b = append(b, x.pipe.Name()...)
		return append(b, '\n')
	case recDrop:
		b = append(b, "drop "...)
	default:
		b = append(b, "recv "...)
	}
	b = append(b, x.pipe.Name()...)
	b = append(b, " len="...)
	b = appendInt(b, int64(x.n))
	b = append(b, " sum="...)
	b = appendHex32(b, x.sum)
	if x.flags&recBTH != 0 {
		b = append(b, ' ')
		b = append(b, x.op.String()...)
		b = append(b, " qpn="...)
		b = appendUint(b, uint64(x.qpn))
		b = append(b, " psn="...)
		b = appendUint(b, uint64(x.psn))
	}
	b = x.appendFlags(b)
	return append(b, '\n')
}

// appendFlags appends what the fault model did to the frame (also the
// capture's comment, after the link's name).
func (x *traceRec) appendFlags(b []byte) []byte {
	if x.kind == recDrop {
		b = append(b, " drop="...)
		b = append(b, x.cause.String()...)
	}
	if x.flags&recDup != 0 {
		b = append(b, " dup"...)
	}
	if x.flags&recReordered != 0 {
		b = append(b, " reordered"...)
	}
	if x.flags&recCorrupt != 0 {
		b = append(b, " corrupt"...)
	}
	return b
}
