package qp

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/packet"
)

func TestPostSendErrors(t *testing.T) {
	for _, st := range []State{Reset, Init, RTR} {
		r := newSendRig(t, RC, 256)
		r.q.attr.State = st
		err := r.q.PostSend(&SendWR{Opcode: WRSend})
		assert.ErrorIs(t, err, ErrQPState, "%s", st)
		assert.Contains(t, err.Error(), fmt.Sprintf("qp %d", rigQPN))
	}
	cases := []struct {
		name string
		typ  Type
		wr   SendWR
		opt  func(*Config, *Attr)
		want error
	}{
		{"UD write", UD, SendWR{Opcode: WRWrite, AH: &AddressVector{}}, nil, ErrInvalidWR},
		{"UC read", UC, SendWR{Opcode: WRRead}, nil, ErrInvalidWR},
		{"UC send with invalidate", UC, SendWR{Opcode: WRSendInv}, nil, ErrInvalidWR},
		{"UD bind MW", UD, SendWR{Opcode: WRBindMW, AH: &AddressVector{}}, nil, ErrInvalidWR},
		{"unknown opcode", RC, SendWR{Opcode: 200}, nil, ErrInvalidWR},
		{"too many SGEs", RC, SendWR{Opcode: WRSend, SGL: make([]SGE, 5)}, nil, ErrInvalidWR},
		{"inline too long", RC, SendWR{Opcode: WRSend, Flags: SendInline, Inline: make([]byte, 65)}, nil, ErrInvalidWR},
		{"inline read", RC, SendWR{Opcode: WRRead, Flags: SendInline}, nil, ErrInvalidWR},
		{"misaligned atomic", RC, SendWR{Opcode: WRFetchAdd, RemoteAddr: 0x1004, SGL: []SGE{{Length: 8}}}, nil, ErrInvalidWR},
		{"atomic buffer not 8 bytes", RC, SendWR{Opcode: WRCmpSwap, SGL: []SGE{{Length: 16}}}, nil, ErrInvalidWR},
		{"UD without AH", UD, SendWR{Opcode: WRSend}, nil, ErrInvalidWR},
		{"read with max_rd_atomic 0", RC, SendWR{Opcode: WRRead},
			func(c *Config, a *Attr) { a.MaxRdAtomic = 0 }, ErrInvalidWR},
		{"message over 2^31", RC, SendWR{Opcode: WRSend, SGL: []SGE{{Length: 1 << 31}, {Length: 1}}}, nil, ErrInvalidWR},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var opts []func(*Config, *Attr)
			if c.opt != nil {
				opts = append(opts, c.opt)
			}
			r := newSendRig(t, c.typ, 256, opts...)
			err := r.q.PostSend(&c.wr)
			assert.ErrorIs(t, err, c.want)
			assert.Equal(t, 0, r.q.sq.len())
		})
	}
	t.Run("queue full", func(t *testing.T) {
		r := newSendRig(t, RC, 256, func(c *Config, a *Attr) { c.MaxSendWR = 3 })
		for i := 0; i < 3; i++ {
			r.post(SendWR{Opcode: WRSend})
		}
		err := r.q.PostSend(&SendWR{Opcode: WRSend})
		assert.ErrorIs(t, err, ErrQueueFull)
		// Completing one frees a slot.
		r.tx()
		r.ack(rigPSN)
		assert.NoError(t, r.q.PostSend(&SendWR{Opcode: WRSend}))
	})
}

func TestPostInErrFlushesAtOnce(t *testing.T) {
	r := newSendRig(t, RC, 256)
	r.q.toError()
	r.post(SendWR{ID: 5, Opcode: WRSend}) // unsignaled: flushed anyway
	wcs := r.poll()
	require.Len(t, wcs, 1)
	assert.Equal(t, WC{ID: 5, Status: WCWRFlushErr, QPN: rigQPN}, wcs[0])
	assert.Empty(t, r.tx())
}

func TestLocalInvalidate(t *testing.T) {
	r := newSendRig(t, RC, 256)
	r.buf(1, 64, 0)
	r.buf(0x55, 64, AccessRemoteWrite)
	r.post(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 8, LKey: 1}}})
	r.post(SendWR{ID: 2, Opcode: WRLocalInv, Flags: SendSignaled, InvRKey: 0x55})
	r.post(SendWR{ID: 3, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 8, LKey: 1}}})
	ps := r.tx()
	assert.Equal(t, []uint32{100, 101}, psns(ps), "LOCAL_INV takes no PSN")
	assert.Equal(t, []uint32{0x55}, r.mem.Invalidated, "executed in order at the requester")
	assert.Empty(t, r.poll(), "completes in order, behind the unacknowledged SEND")
	r.ack(100)
	wcs := r.poll()
	assert.Equal(t, []uint64{1, 2}, wcIDs(wcs))
	assert.Equal(t, WCLocalInv, wcs[1].Opcode)
	r.ack(101)
	assert.Equal(t, []uint64{3}, wcIDs(r.poll()))

	// A failing LOCAL_INV completes in error and takes the QP to ERR.
	r.post(SendWR{ID: 4, Opcode: WRLocalInv, InvRKey: 0x55}) // already invalid
	r.post(SendWR{ID: 5, Opcode: WRSend})
	assert.Empty(t, r.tx())
	wcs = r.poll()
	require.Len(t, wcs, 2)
	assert.Equal(t, WCLocQPOpErr, wcs[0].Status)
	assert.Equal(t, WCWRFlushErr, wcs[1].Status)
	assert.Equal(t, Err, r.q.State())
}

func TestLocalProtectionError(t *testing.T) {
	r := newSendRig(t, RC, 256)
	r.buf(1, 64, 0)
	r.post(SendWR{ID: 1, Opcode: WRSend, SGL: []SGE{{Length: 8, LKey: 1}}})
	r.post(SendWR{ID: 2, Opcode: WRSend, SGL: []SGE{{Addr: 60, Length: 8, LKey: 1}}}) // out of bounds
	r.post(SendWR{ID: 3, Opcode: WRSend, SGL: []SGE{{Length: 8, LKey: 1}}})
	ps := r.tx()
	require.Len(t, ps, 1)
	assert.Empty(t, r.poll(), "the error completes in order, after the outstanding SEND")
	assert.Equal(t, RTS, r.q.State())
	r.ack(100)
	wcs := r.poll()
	require.Len(t, wcs, 2, "unsignaled success retires silently; the error and the flush complete")
	assert.Equal(t, WC{ID: 2, Status: WCLocProtErr, QPN: rigQPN}, wcs[0])
	assert.Equal(t, WCWRFlushErr, wcs[1].Status)
	assert.Equal(t, Err, r.q.State())

	// Unknown lkey, at the head: immediate.
	r = newSendRig(t, UC, 256)
	r.post(SendWR{ID: 7, Opcode: WRWrite, SGL: []SGE{{Length: 8, LKey: 42}}})
	assert.Empty(t, r.tx())
	wcs = r.poll()
	require.Len(t, wcs, 1)
	assert.Equal(t, WCLocProtErr, wcs[0].Status)
	assert.Equal(t, Err, r.q.State())
}

// TestLocalProtectionErrorMidMessage: an SGE that runs past its region
// fails at the packet that reaches past it, not before: the packets before
// it go out whole (the requester asks for the next packet's bytes too, to
// prefetch them, and must not fail early when they are out of bounds).
func TestLocalProtectionErrorMidMessage(t *testing.T) {
	r := newSendRig(t, RC, 256)
	b := r.buf(1, 600, 0)
	r.post(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 768, LKey: 1}}})
	ps := r.tx()
	require.Len(t, ps, 2, "the third packet, bytes 512-767, reaches past the 600-byte region")
	assert.Equal(t, b[:256], ps[0].Payload)
	assert.Equal(t, b[256:512], ps[1].Payload)
	wcs := r.poll()
	require.Len(t, wcs, 1)
	assert.Equal(t, WC{ID: 1, Status: WCLocProtErr, QPN: rigQPN}, wcs[0])
	assert.Equal(t, Err, r.q.State())
}

func TestFence(t *testing.T) {
	r := newSendRig(t, RC, 256)
	r.buf(1, 64, AccessLocalWrite)
	r.post(SendWR{ID: 1, Opcode: WRRead, SGL: []SGE{{Length: 8, LKey: 1}}, RKey: 3})
	r.post(SendWR{ID: 2, Opcode: WRSend, SGL: []SGE{{Length: 4, LKey: 1}}})
	r.post(SendWR{ID: 3, Opcode: WRSend, Flags: SendFence, SGL: []SGE{{Length: 4, LKey: 1}}})
	ps := r.tx()
	require.Equal(t, []packet.Opcode{packet.RCReadRequest, packet.RCSendOnly}, ops(ps))
	assert.Empty(t, r.tx(), "fenced SEND waits for the READ")
	r.readResp(packet.RCReadResponseOnly, 100, make([]byte, 8))
	ps = r.tx()
	require.Len(t, ps, 1)
	assert.Equal(t, uint32(102), ps[0].BTH.PSN)
}

func TestMaxRdAtomicWindow(t *testing.T) {
	r := newSendRig(t, RC, 256, func(c *Config, a *Attr) { a.MaxRdAtomic = 3 }) // rounds up to 4
	r.buf(1, 64, AccessLocalWrite)
	for i := 0; i < 6; i++ {
		r.post(SendWR{ID: uint64(i), Opcode: WRFetchAdd, Flags: SendSignaled, SGL: []SGE{{Length: 8, LKey: 1}}, RKey: 3})
	}
	ps := r.tx()
	require.Len(t, ps, 4, "max_rd_atomic 3 rounds up to 4 credits, as rxe")
	r.atomicAck(100, 1)
	ps = r.tx()
	require.Len(t, ps, 1, "a completion returns a credit")
	assert.Equal(t, uint32(104), ps[0].BTH.PSN)

	r = newSendRig(t, RC, 256, func(c *Config, a *Attr) { a.MaxRdAtomic = 1 })
	r.buf(1, 64, AccessLocalWrite)
	r.post(SendWR{ID: 1, Opcode: WRRead, SGL: []SGE{{Length: 8, LKey: 1}}})
	r.post(SendWR{ID: 2, Opcode: WRSend})
	r.post(SendWR{ID: 3, Opcode: WRRead, SGL: []SGE{{Length: 8, LKey: 1}}})
	r.post(SendWR{ID: 4, Opcode: WRSend})
	ps = r.tx()
	require.Equal(t, []packet.Opcode{packet.RCReadRequest, packet.RCSendOnly}, ops(ps), "second READ waits; in-order SQ")
}

func TestSQDrain(t *testing.T) {
	r := newSendRig(t, RC, 256, func(c *Config, a *Attr) { a.EnSQDAsyncNotify = true })
	r.buf(1, 1024, 0)
	r.post(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 600, LKey: 1}}})
	r.post(SendWR{ID: 2, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 4, LKey: 1}}})
	var o Outgoing
	require.True(t, r.q.Transmit(r.now, &o)) // SEND_FIRST of WR 1
	r.setState(SQD)
	r.post(SendWR{ID: 3, Opcode: WRSend, Flags: SendSignaled}) // posting is allowed in SQD
	ps := r.tx()
	require.Equal(t, []packet.Opcode{packet.RCSendMiddle, packet.RCSendLast}, ops(ps), "the started message finishes")
	assert.Empty(t, r.events)
	r.ack(102)
	assert.Equal(t, []uint64{1}, wcIDs(r.poll()))
	assert.Equal(t, []Event{{Type: EventSQDrained, QPN: rigQPN}}, r.events)
	r.setState(RTS)
	ps = r.tx()
	assert.Equal(t, []uint32{103, 104}, psns(ps))
}

func TestSQDEmptyDrainsAtOnce(t *testing.T) {
	r := newSendRig(t, RC, 256, func(c *Config, a *Attr) { a.EnSQDAsyncNotify = true })
	r.setState(SQD)
	assert.Equal(t, []Event{{Type: EventSQDrained, QPN: rigQPN}}, r.events)
	r = newSendRig(t, RC, 256) // without EnSQDAsyncNotify: no event
	r.setState(SQD)
	assert.Empty(t, r.events)
}

func TestSteadyStateAllocs(t *testing.T) {
	r := newSendRig(t, RC, 1024)
	r.buf(1, 8192, 0)
	r.buf(2, 8192, 0)
	wr := SendWR{ID: 1, Opcode: WRWrite, Flags: SendSignaled, RKey: 5,
		SGL: []SGE{{Length: 1500, LKey: 1}, {Addr: 0, Length: 2000, LKey: 2}}}
	var o Outgoing
	wcs := make([]WC, 4)
	in := Incoming{}
	in.Pkt.BTH = packet.BTHFields{Opcode: packet.RCAcknowledge}
	in.Pkt.AETH.Syndrome = packet.SyndromeACKUnlimited
	allocs := testing.AllocsPerRun(200, func() {
		if err := r.q.PostSend(&wr); err != nil {
			panic(err)
		}
		var last uint32
		for r.q.Transmit(r.now, &o) {
			last = o.Pkt.BTH.PSN
		}
		in.Pkt.BTH.PSN = last
		r.q.Receive(r.now, &in)
		if r.cq.Poll(wcs) != 1 || wcs[0].Status != WCSuccess {
			panic("no completion")
		}
	})
	assert.Zero(t, allocs)
}

func TestPostSendErrorNamesCause(t *testing.T) {
	r := newSendRig(t, RC, 256)
	err := r.q.PostSend(&SendWR{Opcode: WRSend, SGL: make([]SGE, 9)})
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrInvalidWR))
	assert.Contains(t, err.Error(), "9 SGEs")
}

// TestSendSideThroughModify drives the send side through the real Modify
// (RESET -> INIT -> RTR -> RTS -> SQD -> RTS -> ERR), checking that it picks
// up the SQ PSN, the retry attributes and max_rd_atomic, and flushes on ERR.
func TestSendSideThroughModify(t *testing.T) {
	mem := newFakeMemory()
	cq := NewCQ(64)
	var events []Event
	q, err := New(Config{QPN: 7, Type: RC, SendCQ: cq, RecvCQ: NewCQ(8), Memory: mem, MaxSendWR: 8,
		MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 1, Events: func(e Event) { events = append(events, e) }})
	require.NoError(t, err)
	buf := make([]byte, 64)
	mem.Register(1, buf, AccessLocalWrite)
	require.ErrorIs(t, q.PostSend(&SendWR{Opcode: WRSend}), ErrQPState)
	require.NoError(t, q.Modify(&Attr{State: Init, Port: 1, AccessFlags: AccessRemoteWrite},
		AttrState|AttrPKeyIndex|AttrPort|AttrAccessFlags))
	require.ErrorIs(t, q.PostSend(&SendWR{Opcode: WRSend}), ErrQPState)
	require.NoError(t, q.Modify(&Attr{State: RTR, PathMTU: 1024, DestQPN: 9, RQPSN: 5, MaxDestRdAtomic: 1,
		MinRNRTimer: 12, AV: AddressVector{DGID: netip.MustParseAddr("10.0.0.2")}},
		AttrState|AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer))
	require.ErrorIs(t, q.PostSend(&SendWR{Opcode: WRSend}), ErrQPState)
	require.NoError(t, q.Modify(&Attr{State: RTS, SQPSN: 0x123456, Timeout: 3, RetryCnt: 1, RNRRetry: 0,
		MaxRdAtomic: 1, EnSQDAsyncNotify: true}, AttrState|AttrSQPSN|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic))
	require.NoError(t, q.PostSend(&SendWR{ID: 1, Opcode: WRRead, Flags: SendSignaled, SGL: []SGE{{Length: 8, LKey: 1}}}))
	require.NoError(t, q.PostSend(&SendWR{ID: 2, Opcode: WRRead, Flags: SendSignaled, SGL: []SGE{{Length: 8, LKey: 1}}}))
	var o Outgoing
	require.True(t, q.Transmit(0, &o))
	assert.Equal(t, uint32(0x123456), o.Pkt.BTH.PSN)
	assert.Equal(t, uint32(9), o.Pkt.BTH.DestQP)
	assert.False(t, q.Transmit(0, &o), "max_rd_atomic 1 holds the second READ")
	assert.Equal(t, Time(4096<<3), q.Deadline())

	require.NoError(t, q.Modify(&Attr{State: SQD, EnSQDAsyncNotify: true}, AttrState|AttrEnSQDAsyncNotify))
	assert.Empty(t, events, "the READ is still outstanding")
	var in Incoming
	in.Pkt.BTH = packet.BTHFields{Opcode: packet.RCReadResponseOnly, PSN: 0x123456}
	in.Pkt.AETH.Syndrome = packet.SyndromeACKUnlimited
	in.Pkt.Payload = []byte{1, 2, 3, 4, 5, 6, 7, 8}
	q.Receive(10, &in)
	assert.Equal(t, []Event{{Type: EventSQDrained, QPN: 7}}, events)
	assert.False(t, q.Transmit(10, &o), "SQD starts nothing new")
	require.NoError(t, q.Modify(&Attr{State: RTS}, AttrState))
	require.True(t, q.Transmit(20, &o))
	assert.Equal(t, uint32(0x123457), o.Pkt.BTH.PSN)

	// retry_cnt 1: one retransmission, then RETRY_EXC_ERR.
	now := q.Deadline()
	q.Tick(now)
	require.True(t, q.Transmit(now, &o))
	assert.Equal(t, uint32(0x123457), o.Pkt.BTH.PSN)
	assert.Equal(t, now+4096<<3, q.Deadline())
	q.Tick(q.Deadline())
	wcs := make([]WC, 4)
	require.Equal(t, 2, cq.Poll(wcs))
	assert.Equal(t, WCSuccess, wcs[0].Status)
	assert.Equal(t, buf[:8], []byte{1, 2, 3, 4, 5, 6, 7, 8})
	assert.Equal(t, WCRetryExcErr, wcs[1].Status)
	assert.Equal(t, Err, q.State())

	// RESET takes posting away again.
	require.NoError(t, q.Modify(&Attr{State: Reset}, AttrState))
	assert.ErrorIs(t, q.PostSend(&SendWR{Opcode: WRSend}), ErrQPState)
	assert.Equal(t, Never, q.Deadline())
}
