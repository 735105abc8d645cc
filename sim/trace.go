package sim

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"strconv"
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
type recorder struct {
	loop  *netsim.Loop
	hash  hash.Hash
	log   io.Writer // optional copy of the event log
	pcap  *pcapio.Writer
	buf   []byte // lines not yet hashed (and written to log)
	cmt   []byte
	lines uint64
	err   error
}

// flushAt is how many bytes of log lines the recorder gathers before it
// hashes them (and writes them to the log): hashing lines one by one costs
// more than the hashing itself. The digest does not depend on how the log
// is cut into writes.
const flushAt = 16 << 10

func newRecorder(loop *netsim.Loop, log io.Writer, pcap *pcapio.Writer) *recorder {
	return &recorder{loop: loop, hash: sha256.New(), log: log, pcap: pcap, buf: make([]byte, 0, flushAt+512)}
}

// begin starts a log line with the current time and kind; the line is built
// in place at the end of the buffer.
func (r *recorder) begin(kind string) []byte {
	b := strconv.AppendInt(r.buf, int64(r.loop.Now()), 10)
	b = append(b, ' ')
	return append(b, kind...)
}

// end finishes and records the log line begin started.
func (r *recorder) end(b []byte) {
	r.buf = append(b, '\n')
	r.lines++
	if len(r.buf) >= flushAt {
		r.flush()
	}
}

// flush hashes (and writes to the log) the lines gathered so far.
func (r *recorder) flush() {
	r.hash.Write(r.buf)
	if r.log != nil && r.err == nil {
		_, r.err = r.log.Write(r.buf)
	}
	r.buf = r.buf[:0]
}

// network records a network trace event.
func (r *recorder) network(ev *netsim.TraceEvent) {
	var b []byte
	switch ev.Kind {
	case netsim.TraceDrop:
		b = r.begin("drop ")
	case netsim.TraceDeliver:
		b = r.begin("recv ")
	case netsim.TracePartition:
		b = r.begin("cut ")
		if !ev.Cut {
			b = r.begin("heal ")
		}
		b = append(b, ev.Pipe.Name()...)
		r.end(b)
		return
	}
	b = append(b, ev.Pipe.Name()...)
	b = append(b, " len="...)
	b = strconv.AppendInt(b, int64(len(ev.Frame)), 10)
	b = append(b, " sum="...)
	seen := ev.SumKnown()
	b = strconv.AppendUint(b, uint64(ev.Sum()), 16)
	var fr packet.Frame // a local: see icrcOK
	// The frame's first line names its opcode, QPN and PSN; its lines at
	// later hops, unchanged (the same sum, carried from hop to hop), only
	// the link: a third of the log's bytes in a fabric, and a parse per hop.
	if !seen && packet.ParseFrameUnverified(ev.Frame, &fr) == nil && len(fr.Transport) >= packet.BTHLen {
		bth := packet.BTH(fr.Transport)
		b = append(b, ' ')
		b = append(b, bth.Opcode().String()...)
		b = append(b, " qpn="...)
		b = strconv.AppendUint(b, uint64(bth.DestQP()), 10)
		b = append(b, " psn="...)
		b = strconv.AppendUint(b, uint64(bth.PSN()), 10)
	}
	mark := len(b)
	if ev.Kind == netsim.TraceDrop {
		b = append(b, " drop="...)
		b = append(b, ev.Cause.String()...)
	}
	if ev.Dup {
		b = append(b, " dup"...)
	}
	if ev.Reordered {
		b = append(b, " reordered"...)
	}
	if ev.Corrupt {
		b = append(b, " corrupt"...)
	}
	if r.pcap != nil && r.err == nil {
		c := append(r.cmt[:0], ev.Pipe.Name()...)
		c = append(c, b[mark:]...)
		r.cmt = c
		r.err = r.pcap.WritePacket(time.Unix(0, int64(r.loop.Now())), ev.Frame, string(c))
	}
	r.end(b)
}

// event records a workload event: kind and preformatted fields.
func (r *recorder) event(kind string, fields ...string) {
	b := r.begin(kind)
	for _, f := range fields {
		b = append(b, ' ')
		b = append(b, f...)
	}
	r.end(b)
}

// op records a workload event about operation i of a flow: the line event
// would write for (kind, flow, i, s, n), without formatting the numbers into
// strings first.
func (r *recorder) op(kind, flow string, i int, s string, n int) {
	b := r.begin(kind)
	b = append(b, ' ')
	b = append(b, flow...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(i), 10)
	b = append(b, ' ')
	b = append(b, s...)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(n), 10)
	r.end(b)
}

// sum returns the hex SHA-256 of the event log so far, having written all of
// it to the log.
func (r *recorder) sum() string {
	r.flush()
	return hex.EncodeToString(r.hash.Sum(nil))
}
