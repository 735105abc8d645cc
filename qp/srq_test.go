package qp

import (
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func srqPost(t *testing.T, s *SRQ, id uint64, addr uint64, length uint32) {
	t.Helper()
	require.NoError(t, s.Post(&RecvWR{ID: id, SGL: []SGE{{Addr: addr, Length: length, LKey: rspRecvKey}}}))
}

func TestSRQPostChecks(t *testing.T) {
	s := NewSRQ(2, 1, nil)
	assert.Equal(t, 2, s.Max())
	assert.Equal(t, 1, s.MaxSGE())
	assert.ErrorIs(t, s.Post(&RecvWR{SGL: make([]SGE, 2)}), ErrTooManySGE)
	require.NoError(t, s.Post(&RecvWR{ID: 1}))
	require.NoError(t, s.Post(&RecvWR{ID: 2}))
	assert.Equal(t, 2, s.Len())
	assert.ErrorIs(t, s.Post(&RecvWR{ID: 3}), ErrQueueFull)
	assert.ErrorIs(t, s.SetLimit(3), ErrInvalidAttr)
	assert.ErrorIs(t, s.SetLimit(-1), ErrInvalidAttr)
	require.NoError(t, s.SetLimit(2))
	assert.Equal(t, 2, s.Limit())
}

func TestSRQSharedByQPs(t *testing.T) {
	s := NewSRQ(8, 2, nil)
	a := newRespRig(t, RC, rspWithSRQ(s))
	b := newRespRig(t, UD, rspWithSRQ(s))
	// Both QPs resolve keys in the same fake memory for this test.
	b.q.cfg.Memory = a.mem
	assert.ErrorIs(t, a.q.PostRecv(&RecvWR{ID: 9}), ErrHasSRQ)
	srqPost(t, s, 1, 0, 4096)
	srqPost(t, s, 2, 4096, 4096)
	srqPost(t, s, 3, 8192, 4096)

	data := rspFill(300, 4)
	a.recv(rspPkt(packet.RCSendFirst, rspPSN, data[:256], nil))
	// The SRQ slot the message took may be reposted while it arrives.
	srqPost(t, s, 4, 12288, 4096)
	b.q.Receive(b.now, &Incoming{Pkt: udPkt(packet.UDSendOnly, rspQKey, 5, rspFill(10, 0))})
	a.recv(rspPkt(packet.RCSendLast, rspPSN+1, data[256:], rspAckReq))

	wa, wb := a.wcs(), b.wcs()
	require.Len(t, wa, 1)
	require.Len(t, wb, 1)
	assert.Equal(t, uint64(1), wa[0].ID, "first posted, first used")
	assert.Equal(t, uint32(300), wa[0].ByteLen)
	assert.Equal(t, data, a.recvBuf()[:300])
	assert.Equal(t, uint64(2), wb[0].ID)
	assert.Equal(t, 2, s.Len())
	rspRequireAck(t, a.drain(), packet.SyndromeACKUnlimited, rspPSN+1, 1)
}

func TestSRQEmptyRNR(t *testing.T) {
	s := NewSRQ(4, 1, nil)
	r := newRespRig(t, RC, rspWithSRQ(s))
	r.recv(rspPkt(packet.RCSendOnly, rspPSN, rspFill(4, 0), nil))
	rspRequireAck(t, r.drain(), packet.MakeRNR(rspRNR), rspPSN, 0)
}

func TestSRQLimitEvent(t *testing.T) {
	var events []Event
	s := NewSRQ(8, 1, func(e Event) { events = append(events, e) })
	r := newRespRig(t, RC, rspWithSRQ(s))
	for i := uint64(0); i < 4; i++ {
		srqPost(t, s, i, i*64, 64)
	}
	require.NoError(t, s.SetLimit(3))
	// 4 -> 3 posted: not below the limit.
	r.recv(rspPkt(packet.RCSendOnly, rspPSN, rspFill(4, 0), nil))
	assert.Empty(t, events)
	// 3 -> 2: below, the event fires once and disarms.
	r.recv(rspPkt(packet.RCSendOnly, rspPSN+1, rspFill(4, 0), nil))
	assert.Equal(t, []Event{{Type: EventSRQLimitReached}}, events)
	assert.Zero(t, s.Limit())
	r.recv(rspPkt(packet.RCSendOnly, rspPSN+2, rspFill(4, 0), nil))
	assert.Len(t, events, 1, "disarmed")
	// Re-arming works again.
	require.NoError(t, s.SetLimit(2))
	r.recv(rspPkt(packet.RCSendOnly, rspPSN+3, rspFill(4, 0), nil))
	assert.Len(t, events, 2)
	assert.Len(t, r.wcs(), 4)
}

func TestSRQErrRaisesLastWQEReached(t *testing.T) {
	s := NewSRQ(4, 1, nil)
	r := newRespRig(t, RC, rspWithSRQ(s))
	srqPost(t, s, 1, 0, 4096)
	srqPost(t, s, 2, 4096, 4096)
	srqPost(t, s, 3, 8192, 4096)
	r.recv(rspPkt(packet.RCSendFirst, rspPSN, rspFill(rspMTU, 0), nil))
	require.NoError(t, r.q.Modify(&Attr{State: Err}, AttrState))
	assert.Contains(t, r.events, Event{Type: EventQPLastWQEReached, QPN: rspQPN})
	wcs := r.wcs()
	require.Len(t, wcs, 1, "only the WQE the QP had taken is flushed")
	assert.Equal(t, WC{ID: 1, Status: WCWRFlushErr, Opcode: WCRecv, QPN: rspQPN}, wcs[0])
	assert.Equal(t, 2, s.Len(), "the SRQ keeps its WQEs for the other QPs")
}
