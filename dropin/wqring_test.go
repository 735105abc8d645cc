package dropin

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/verbsapi"
)

// progRing is a program's view of one work ring: what the library does.
type progRing struct{ mem []byte }

func (r progRing) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&r.mem[off])) }
func (r progRing) slots() uint32        { return *r.word(wqRingSlots) }
func (r progRing) slotSize() int        { return int(*r.word(wqRingSlotSize)) }

// put writes rec into the next slot and publishes it.
func (r progRing) put(rec []byte) {
	prod := atomic.LoadUint32(r.word(wqRingProd))
	off := wqRingHeader + int(prod%r.slots())*r.slotSize()
	copy(r.mem[off:off+r.slotSize()], rec)
	atomic.StoreUint32(r.word(wqRingProd), prod+1)
}

// rings returns the program's views of a QP's send and receive rings.
func (c *testClient) ringsOf(qp uint32) (sq, rq progRing) {
	mem := c.qpRings[qp]
	sq = progRing{mem}
	rqOff := ringSlot(ringBytes(sq.slots(), sq.slotSize()))
	return sq, progRing{mem[rqOff:]}
}

// drain runs what the poller runs.
func (c *testClient) drain() {
	c.local.mu.Lock()
	defer c.local.mu.Unlock()
	c.local.drainRingsLocked()
}

// ringPair starts a daemon and two programs on it whose RC QPs are
// connected to each other.
func ringPair(t *testing.T) (a, b *program) {
	d, _ := startTestDaemon(t, "10.0.0.9")
	return localPrograms(t, d)
}

// localPrograms sets up two in-process programs on d (localClient) whose
// RC QPs are connected to each other, as connectedPrograms does over a
// socket.
func localPrograms(t *testing.T, d *testDaemon) (a, b *program) {
	gid := gid1(t, d)
	a = setupProgram(t, localClient(t, d), 0x7f0000100000)
	b = setupProgram(t, localClient(t, d), 0x7f0000200000)
	connectQP(t, a.testClient, a.qp.Handle, b.qp.QPNum, gid)
	connectQP(t, b.testClient, b.qp.Handle, a.qp.QPNum, gid)
	return a, b
}

// sendThroughRings posts a receive (WR 7) in b's receive ring and a SEND of
// msg (WR 9) in a's send ring, lets a's poller take the SEND, and checks
// that both complete and msg arrived: the device found the receive in the
// ring when the message needed it.
func sendThroughRings(t *testing.T, a, b *program, msg string) {
	t.Helper()
	asq, _ := a.ringsOf(a.qp.Handle)
	_, brq := b.ringsOf(b.qp.Handle)
	copy(a.mem.mem, msg)
	brq.put(append(enc(wireRecvWR{WRID: 7, NumSGE: 1}), enc(b.sge(0, 64))...))
	asq.put(append(enc(wireSendWR{WRID: 9, Opcode: uint32(verbsapi.WRSend), SendFlags: wrSignal, NumSGE: 1}),
		enc(a.sge(0, len(msg)))...))
	a.drain()
	assert.Equal(t, uint64(9), a.pollOne(a.cq).WRID)
	assert.Equal(t, uint64(7), b.pollOne(b.cq).WRID)
	assert.Equal(t, msg, string(b.mem.mem[:len(msg)]))
}

// WRs posted through the rings, as the library lays them out, move data
// and complete like posted ones: a receive in b's ring is found by the
// SEND that arrives for it, and both rings' done counts follow the
// completions. Then the program writes nonsense: counts far ahead, slots
// of garbage. The daemon reads no more than a ring's worth, refuses the
// WRs, moves the QP to the error state and goes on serving.
func TestQPRingsUntrusted(t *testing.T) {
	a, b := ringPair(t)
	asq, _ := a.ringsOf(a.qp.Handle)
	_, brq := b.ringsOf(b.qp.Handle)
	require.EqualValues(t, 16, asq.slots())

	sendThroughRings(t, a, b, "through the ring")
	assert.EqualValues(t, 1, atomic.LoadUint32(asq.word(wqRingDone)), "the send ring's done count")
	assert.EqualValues(t, 1, atomic.LoadUint32(brq.word(wqRingDone)), "the receive ring's done count")

	// Garbage: a send WR claiming more SGEs and inline bytes than its
	// slot holds, then a count a million ahead.
	bad := make([]byte, asq.slotSize())
	for i := range bad {
		bad[i] = 0xff
	}
	binary.LittleEndian.PutUint32(bad[8:], uint32(verbsapi.WRSend))
	asq.put(bad)
	atomic.StoreUint32(asq.word(wqRingProd), atomic.LoadUint32(asq.word(wqRingProd))+1_000_000)
	a.drain()
	assert.LessOrEqual(t, atomic.LoadUint32(asq.word(wqRingCons)), 1+asq.slots(), "at most a ring's worth read in one pass")
	var attr wireQueryQPResp
	a.do(opQueryQP, enc(wireHandle{a.qp.Handle}), &attr)
	assert.EqualValues(t, verbsapi.QPSErr, attr.Attr.QPState, "a refused WR moves the QP to the error state")
	// The daemon still serves the program.
	a.handle(opAllocPD, nil)
}

// A poller going to sleep asks for the doorbell in a QP's send ring but,
// while the QP works, not in its receive ring: the device takes a receive
// WR when a message needs one, so a post there makes no system call. A QP
// in the error state must flush what is posted to it: its receive ring
// asks too. Waking clears both.
func TestQPRingsReceiveDoorbellOnlyInError(t *testing.T) {
	a, b := ringPair(t)
	asq, arq := a.ringsOf(a.qp.Handle)
	_, brq := b.ringsOf(b.qp.Handle)
	bell := func(r progRing) uint32 { return atomic.LoadUint32(r.word(wqRingSleeping)) }
	a.local.drainRings(true)
	b.local.drainRings(true)
	assert.EqualValues(t, 1, bell(asq), "send ring: ring when the poller sleeps")
	assert.EqualValues(t, 0, bell(arq), "receive ring of a working QP: never")
	assert.EqualValues(t, 0, bell(brq))

	// A receive posted while b's poller sleeps, with no doorbell, is found
	// by the SEND that arrives for it.
	sendThroughRings(t, a, b, "no doorbell")

	require.Zero(t, a.modify(a.qp.Handle, verbsapi.QPAttrState, wireQPAttr{QPState: uint32(verbsapi.QPSErr)}))
	a.local.drainRings(true)
	assert.EqualValues(t, 1, bell(arq), "receive ring of a QP in the error state: ring")
	a.local.wake()
	assert.EqualValues(t, 0, bell(asq))
	assert.EqualValues(t, 0, bell(arq))
	a.local.drainRings(true)
	assert.EqualValues(t, 1, bell(arq), "the note stays while a QP is in the error state")

	require.Zero(t, a.modify(a.qp.Handle, verbsapi.QPAttrState, wireQPAttr{QPState: uint32(verbsapi.QPSReset)}))
	a.local.wake()
	a.local.drainRings(true)
	assert.EqualValues(t, 0, bell(arq), "out of the error state: no doorbell")
	assert.False(t, a.local.errSeen.Load(), "and the states are not asked again")
}

// kickPoller rings the doorbell for the daemon itself, only while the
// poller sleeps and only while it has one.
func TestKickPoller(t *testing.T) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	require.NoError(t, err)
	defer unix.Close(fd)
	c := &conn{bellFD: fd}
	read := func() uint64 {
		var b [8]byte
		if n, err := unix.Read(fd, b[:]); err != nil || n != 8 {
			return 0
		}
		return binary.LittleEndian.Uint64(b[:])
	}
	c.kickPoller()
	assert.Zero(t, read(), "awake: no kick")
	assert.True(t, c.errSeen.Load(), "but the note that a QP may have failed")
	c.asleep.Store(true)
	c.kickPoller()
	assert.EqualValues(t, 1, read(), "asleep: one kick")
	c.bellFD = -1
	c.kickPoller()
	assert.Zero(t, read(), "no doorbell: no kick")
}

// READ and atomics come through the ring too when the QP has a
// max_rd_atomic (the library checks it before it posts them there): they
// read and change the peer's memory and complete like posted ones.
func TestQPRingsReadAtomic(t *testing.T) {
	a, b := ringPair(t)
	asq, _ := a.ringsOf(a.qp.Handle)

	copy(b.mem.mem[256:], "read through the ring")
	binary.LittleEndian.PutUint64(b.mem.mem[512:], 40)
	asq.put(append(enc(wireSendWR{WRID: 1, Opcode: uint32(verbsapi.WRRead), SendFlags: wrSignal, NumSGE: 1,
		RemoteAddr: b.addr + 256, RKey: b.mr.RKey}), enc(a.sge(0, 21))...))
	a.drain()
	assert.Equal(t, uint64(1), a.pollOne(a.cq).WRID)
	asq.put(append(enc(wireSendWR{WRID: 2, Opcode: uint32(verbsapi.WRFetchAdd), SendFlags: wrSignal, NumSGE: 1,
		RemoteAddr: b.addr + 512, RKey: b.mr.RKey, CompareAdd: 2}), enc(a.sge(64, 8))...))
	a.drain()
	assert.Equal(t, uint64(2), a.pollOne(a.cq).WRID)
	assert.Equal(t, "read through the ring", string(a.mem.mem[:21]))
	assert.EqualValues(t, 40, binary.LittleEndian.Uint64(a.mem.mem[64:]), "FETCH_ADD returns the original")
	assert.EqualValues(t, 42, binary.LittleEndian.Uint64(b.mem.mem[512:]), "and adds")
	assert.EqualValues(t, 2, atomic.LoadUint32(asq.word(wqRingDone)), "the send ring's done count")
}

// FuzzQPRings fills a connected QP's send and receive rings with whatever
// the input says, slot by slot, with counts of the input's choosing, and
// lets the daemon take them (and a SEND arrive for the receive ring): a
// program is as hostile here as on the socket. Nothing may panic, and the
// daemon must go on serving.
func FuzzQPRings(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3})
	f.Add(append(enc(wireSendWR{WRID: 1, Opcode: uint32(verbsapi.WRSend), NumSGE: 1}), enc(wireSGE{Length: 8})...))
	f.Add(append([]byte{1}, enc(wireRecvWR{WRID: 2, NumSGE: 200})...))
	d, _ := startTestDaemon(f, "10.0.0.9")
	f.Fuzz(func(t *testing.T, in []byte) {
		a, b := localPrograms(t, d)
		asq, arq := a.ringsOf(a.qp.Handle)
		for len(in) > 0 {
			r := asq
			if in[0]&1 != 0 {
				r = arq
			}
			n := min(len(in)-1, r.slotSize())
			r.put(in[1 : 1+n])
			if in[0]&2 != 0 {
				atomic.AddUint32(r.word(wqRingProd), uint32(in[0])<<20)
			}
			in = in[1+n:]
		}
		a.drain()
		// A SEND for the receive ring's WRs, if any survived.
		b.post(opPostSend, sendBody(b.qp.Handle, testSendWR{wireSendWR: wireSendWR{WRID: 3,
			Opcode: uint32(verbsapi.WRSend)}, sges: []wireSGE{b.sge(0, 8)}}))
		a.drain()
		a.handle(opAllocPD, nil)
	})
}
