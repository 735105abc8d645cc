package qp

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A QP built from a spare is, field for field, the QP New makes afresh,
// whatever the spare went through and whatever the sizes asked for: the
// spare's queues are cleared where they are taken over, and made anew where
// they are too small.
func TestSpareBuildsAsNew(t *testing.T) {
	for _, c := range []struct {
		name                       string
		sendWR, recvWR, sge, inl   int
		sameSend, sameRecv, sameQP bool
	}{
		{"same sizes", 64, 4, 4, 64, true, true, true},
		{"smaller", 8, 2, 1, 0, true, true, true},
		{"larger", 128, 16, 8, 256, false, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			sp := &Spares{Keep: 1}
			// A QP with work in every state: sends and an inline SEND
			// posted and sent, a READ outstanding, receives posted.
			r := newSendRig(t, RC, 256, func(cfg *Config, _ *Attr) { cfg.Spares, cfg.Events = sp, nil })
			src := r.buf(7, 4096, AccessLocalWrite)
			for i := range 6 {
				r.post(SendWR{ID: uint64(i), Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Addr: 0, Length: 700, LKey: 7}}})
			}
			r.post(SendWR{ID: 6, Opcode: WRSend, Flags: SendInline, Inline: src[:40]})
			r.post(SendWR{ID: 7, Opcode: WRRead, SGL: []SGE{{Addr: 1024, Length: 300, LKey: 7}}, RemoteAddr: 0x1000, RKey: 9})
			require.NotEmpty(t, r.tx())
			for i := range 3 {
				require.NoError(t, r.q.PostRecv(&RecvWR{ID: uint64(i), SGL: []SGE{{Addr: 2048, Length: 100, LKey: 7}}}))
			}
			used := r.q
			usedRing, usedRecv := &used.sq.ring[0], &used.rq.ring.wqes[0]
			sp.Put(used)

			cfg := Config{QPN: 9, Type: UC, SendCQ: NewCQ(8), RecvCQ: NewCQ(8), Memory: newFakeMemory(),
				MaxSendWR: c.sendWR, MaxRecvWR: c.recvWR, MaxSendSGE: c.sge, MaxRecvSGE: c.sge, MaxInline: c.inl, Spares: sp}
			got, err := New(cfg)
			require.NoError(t, err)
			want, err := New(cfg) // no spare left: made afresh
			require.NoError(t, err)
			assert.NotSame(t, got, want)
			assert.Equal(t, c.sameQP, got == used, "built in the spare's memory")
			assert.Equal(t, c.sameSend, &got.sq.ring[0] == usedRing, "the spare's send queue taken over")
			assert.Equal(t, c.sameRecv, &got.rq.ring.wqes[0] == usedRecv, "the spare's receive queue taken over")
			assert.True(t, reflect.DeepEqual(want, got), "a QP from a spare differs from a new one")
		})
	}
}

// Spares keeps no more than Keep, and the zero Spares none.
func TestSparesKeep(t *testing.T) {
	var none Spares
	none.Put(&QP{})
	assert.Nil(t, none.take())
	two := Spares{Keep: 2}
	a, b, c := &QP{}, &QP{}, &QP{}
	two.Put(a)
	two.Put(b)
	two.Put(c)
	assert.Same(t, b, two.take())
	assert.Same(t, a, two.take())
	assert.Nil(t, two.take())
}
