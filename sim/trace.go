package sim

import (
	"encoding/hex"
	"io"
	"sync"
	"time"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
	"github.com/softroce/softroce/sim/netsim"
)

// recorder keeps the run's event log and capture. The event log is a line
// per network event and per workload event (posts, completions); its SHA-256
// fingerprints the run, so two runs with the same seed must agree on it. The
// capture holds every frame as it arrived (or was dropped) on each link
// direction, stamped with virtual time, with a comment naming the link and
// what the fault model did to it.
//
// The simulation loop only takes each event's fields down (traceRec); a
// goroutine of the recorder's own turns them into the log's lines, hashes
// and writes them (traceWriter), in order, on another core where there is
// one: the text and its hash were a fifth of a large fabric's run.
type recorder struct {
	loop  *netsim.Loop
	pcap  *pcapio.Writer
	cmt   []byte
	lines uint64
	err   error

	w      *traceWriter
	cur    *traceBatch // the batch being filled
	made   int         // batches made so far (at most batchPool)
	closed bool

	// In a sharded run (parallel.go) each shard has a recorder, and they
	// hold their batches until a window ends; the first shard's recorder
	// queues them by window (window), to be formatted, merged by time and
	// hashed (writeSome) by whichever shard's goroutine is waiting for the
	// other.
	windowed bool
	held     []*traceBatch
	peers    []*recorder // the other shards' recorders (the first shard's only)
	// jobs are windows not yet written, in a sharded run (the first
	// shard's recorder only): written by the shards' goroutines in their
	// waits, so that no third goroutine takes a core from a shard.
	jobs chan traceJob
	// writing is held while a window is taken from jobs and written, so
	// that windows are written one at a time and in order.
	writing sync.Mutex
}

// maxJobs bounds the windows waiting to be written: past it, the first
// shard writes the oldest before it runs on.
const maxJobs = 16

// shard returns a recorder for another shard of a sharded run, which shares
// r's writer; both hold their records until window.
func (r *recorder) shard(loop *netsim.Loop) *recorder {
	p := &recorder{loop: loop, w: r.w, windowed: true}
	if !r.windowed {
		r.windowed = true
		r.jobs = make(chan traceJob, maxJobs)
	}
	r.peers = append(r.peers, p)
	return p
}

// window queues every shard's records of the window that just ended, to be
// merged by time (the first shard's first where times tie) and hashed.
func (r *recorder) window() {
	job := traceJob{shards: make([][]*traceBatch, 1+len(r.peers))}
	for k := range job.shards {
		x := r
		if k > 0 {
			x = r.peers[k-1]
		}
		if x.cur != nil && len(x.cur.recs) > 0 {
			x.held = append(x.held, x.cur)
			x.cur = nil
		}
		job.shards[k], x.held = x.held, nil
	}
	for {
		select {
		case r.jobs <- job:
			return
		default:
			r.writeSome() // the queue is full
		}
	}
}

// writeSome writes the oldest window waiting, and reports whether there
// was one. Either shard's goroutine may call it.
func (r *recorder) writeSome() bool {
	r.writing.Lock()
	defer r.writing.Unlock()
	select {
	case j := <-r.jobs:
		r.w.do(j)
		return true
	default:
		return false
	}
}

// lineCount returns how many lines the recorder and its peers took down.
func (r *recorder) lineCount() uint64 {
	n := r.lines
	for _, p := range r.peers {
		n += p.lines
	}
	return n
}

func newRecorder(loop *netsim.Loop, log io.Writer, pcap *pcapio.Writer) *recorder {
	return &recorder{loop: loop, pcap: pcap, w: newTraceWriter(log)}
}

// rec returns a new record, stamped with the current time, at the end of the
// current batch.
func (r *recorder) rec(kind recKind) *traceRec {
	if r.cur == nil {
		r.cur = r.batch()
	}
	r.cur.recs = append(r.cur.recs, traceRec{at: r.loop.Now(), kind: kind})
	r.lines++
	return &r.cur.recs[len(r.cur.recs)-1]
}

// batch returns an empty batch: a new one while fewer than batchPool exist,
// else the next the writer hands back.
func (r *recorder) batch() *traceBatch {
	if r.windowed {
		// Held until the window ends: take a free one if there is one,
		// but never wait, the writer may be waiting for this window.
		select {
		case b := <-r.w.free:
			return b
		default:
		}
		return newBatch()
	}
	if r.made < batchPool {
		r.made++
		return newBatch()
	}
	return <-r.w.free
}

// newBatch returns a batch from an earlier run, or a new one.
func newBatch() *traceBatch {
	if b, ok := batches.Get().(*traceBatch); ok {
		return b
	}
	return &traceBatch{recs: make([]traceRec, 0, batchRecs), text: make([]byte, 0, batchText)}
}

// filled sends the current batch to the writer once it is full.
func (r *recorder) filled() {
	if b := r.cur; len(b.recs) >= batchRecs || len(b.text) >= batchText {
		if r.windowed {
			r.held = append(r.held, b)
		} else {
			r.w.send(b)
		}
		r.cur = nil
	}
}

// network records a network trace event.
func (r *recorder) network(ev *netsim.TraceEvent) {
	var x *traceRec
	switch ev.Kind {
	case netsim.TraceDrop:
		x = r.rec(recDrop)
		x.cause = ev.Cause
	case netsim.TraceDeliver:
		x = r.rec(recDeliver)
	case netsim.TracePartition:
		x = r.rec(recHeal)
		if ev.Cut {
			x.kind = recCut
		}
		x.pipe = ev.Pipe
		r.filled()
		return
	}
	x.pipe = ev.Pipe
	x.n = int32(len(ev.Frame))
	seen := ev.SumKnown()
	x.sum = ev.Sum()
	// The frame's first line names its opcode, QPN and PSN; its lines at
	// later hops, unchanged (the same sum, carried from hop to hop), only
	// the link: a third of the log's bytes in a fabric, and a parse per hop.
	var fr packet.Frame // a local: see icrcOK
	if !seen && packet.ParseFrameUnverified(ev.Frame, &fr) == nil && len(fr.Transport) >= packet.BTHLen {
		bth := packet.BTH(fr.Transport)
		x.flags |= recBTH
		x.op, x.qpn, x.psn = bth.Opcode(), bth.DestQP(), bth.PSN()
	}
	if ev.Dup {
		x.flags |= recDup
	}
	if ev.Reordered {
		x.flags |= recReordered
	}
	if ev.Corrupt {
		x.flags |= recCorrupt
	}
	if r.pcap != nil && r.err == nil {
		c := append(r.cmt[:0], ev.Pipe.Name()...)
		c = x.appendFlags(c)
		r.cmt = c
		r.err = r.pcap.WritePacket(time.Unix(0, int64(r.loop.Now())), ev.Frame, string(c))
	}
	r.filled()
}

// event records a workload event: kind and preformatted fields.
func (r *recorder) event(kind string, fields ...string) {
	x, t := r.text(kind)
	for _, f := range fields {
		t = append(t, ' ')
		t = append(t, f...)
	}
	r.endText(x, t)
}

// flow is a new flow's line: event("flow", name, typ, "qpn=A/B psn=A/B
// mtu=M") without formatting (a run may create thousands).
func (r *recorder) flow(name, typ string, qpnA, qpnB, psnA, psnB uint32, mtu int) {
	x, t := r.text("flow")
	t = append(append(append(t, ' '), name...), ' ')
	t = append(append(t, typ...), " qpn="...)
	t = appendUint(t, uint64(qpnA))
	t = appendUint(append(t, '/'), uint64(qpnB))
	t = appendUint(append(t, " psn="...), uint64(psnA))
	t = appendUint(append(t, '/'), uint64(psnB))
	t = appendInt(append(t, " mtu="...), int64(mtu))
	r.endText(x, t)
}

// text starts a workload line of kind: its record, and the batch's text
// with the line begun at its end, for endText.
func (r *recorder) text(kind string) (*traceRec, []byte) {
	x := r.rec(recText)
	x.start = int32(len(r.cur.text))
	return x, append(r.cur.text, kind...)
}

// endText ends the line text began.
func (r *recorder) endText(x *traceRec, t []byte) {
	x.end = int32(len(t))
	r.cur.text = t
	r.filled()
}

// op records a workload event about operation i of a flow: the line event
// would write for (kind, flow, i, s, n), without formatting the numbers into
// strings first.
func (r *recorder) op(kind, flow string, i int, s string, n int) {
	x, t := r.text(kind)
	t = append(t, ' ')
	t = append(t, flow...)
	t = append(t, ' ')
	t = appendInt(t, int64(i))
	t = append(t, ' ')
	t = append(t, s...)
	t = append(t, ' ')
	t = appendInt(t, int64(n))
	r.endText(x, t)
}

// close hands what is left to the writer and waits until it has hashed
// and written everything; the recorder takes no more events.
func (r *recorder) close() {
	if r.closed {
		return
	}
	r.closed = true
	if r.windowed {
		r.window()
		for r.writeSome() {
		}
	} else if r.cur != nil && len(r.cur.recs) > 0 {
		r.w.send(r.cur)
	}
	r.cur = nil
	if err := r.w.close(); err != nil && r.err == nil {
		r.err = err
	}
	for len(r.w.free) > 0 { // every batch made is back there now
		batches.Put(<-r.w.free)
	}
}

// batches keeps the batches of finished runs for the next (a sweep, the
// fault search, a benchmark), so that a short run does not allocate half a
// megabyte of them.
var batches sync.Pool

// sum returns the hex SHA-256 of the event log, having written all of it
// to the log; the recorder is closed.
func (r *recorder) sum() string {
	r.close()
	return hex.EncodeToString(r.w.hash.Sum(nil))
}
