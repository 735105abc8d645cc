package qp

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSendQueueSlotsDoNotOverlap fills every slot of the send queue with a
// full SGL (or full inline data) of its own: the slots share one backing
// block each for SGEs and inline bytes, so a slot that could grow into its
// neighbour would show up as another WQE's SGL or data changing.
func TestSendQueueSlotsDoNotOverlap(t *testing.T) {
	r := newSendRig(t, RC, 256)
	cfg := r.q.cfg
	require.Len(t, r.q.sq.ring, cfg.MaxSendWR)
	for i := range r.q.sq.ring {
		w := &r.q.sq.ring[i]
		assert.Equal(t, cfg.MaxSendSGE, cap(w.sgl), "slot %d SGL capacity", i)
		assert.Equal(t, cfg.MaxInline, cap(w.inline), "slot %d inline capacity", i)
	}
	sglOf := func(i int) []SGE {
		s := make([]SGE, cfg.MaxSendSGE)
		for k := range s {
			s[k] = SGE{Addr: uint64(i*100 + k), Length: uint32(k + 1), LKey: uint32(i)}
		}
		return s
	}
	inlineOf := func(i int) []byte {
		b := make([]byte, cfg.MaxInline)
		for k := range b {
			b[k] = byte(i*7 + k)
		}
		return b
	}
	for i := 0; i < cfg.MaxSendWR; i++ {
		wr := SendWR{ID: uint64(i), Opcode: WRSend, SGL: sglOf(i)}
		if i%2 == 1 {
			wr = SendWR{ID: uint64(i), Opcode: WRSend, Flags: SendInline, Inline: inlineOf(i)}
		}
		r.post(wr)
	}
	for i := 0; i < cfg.MaxSendWR; i++ {
		w := r.q.sq.at(uint64(i))
		require.Equal(t, uint64(i), w.wr.ID)
		if i%2 == 1 {
			assert.Equal(t, inlineOf(i), w.wr.Inline, "slot %d inline data", i)
			assert.Empty(t, w.wr.SGL)
		} else {
			assert.Equal(t, sglOf(i), w.wr.SGL, "slot %d SGL", i)
		}
	}
}

// TestGatherBufAllocatedOnFirstUse checks that a QP allocates its gather
// buffer only when a packet spans several SGEs, and that the buffer keeps
// its size limit: one packet's payload at the QP's largest MTU.
func TestGatherBufAllocatedOnFirstUse(t *testing.T) {
	r := newSendRig(t, RC, 1024)
	assert.Nil(t, r.q.req.scratch, "no gather buffer at creation")
	a := r.buf(1, 4096, 0)
	b := r.buf(2, 4096, 0)

	r.post(SendWR{ID: 1, Opcode: WRSend, SGL: []SGE{{Length: 3000, LKey: 1}}})
	require.Len(t, r.tx(), 3)
	assert.Nil(t, r.q.req.scratch, "single-SGE packets alias registered memory")

	r.post(SendWR{ID: 2, Opcode: WRSend, SGL: []SGE{{Length: 600, LKey: 1}, {Addr: 100, Length: 600, LKey: 2}}})
	ps := r.tx()
	require.Len(t, ps, 2)
	want := append(append([]byte(nil), a[:600]...), b[100:700]...)
	assert.Equal(t, want, append(ps[0].Payload, ps[1].Payload...))
	require.NotNil(t, r.q.req.scratch)
	assert.Len(t, r.q.req.scratch, 4096, "max(MaxMTU, 4096)")

	assert.Nil(t, r.q.gatherBuf(4097), "larger than any packet's payload")
	assert.Len(t, r.q.gatherBuf(4096), 4096)
}
