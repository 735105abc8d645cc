package rsocket

// conn.go: a connection's state, its buffers and queue pair, and the
// net.Conn methods.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/softroce/softroce/verbsapi"
)

// Connection state bits, as librdmacm's.
const (
	stConnected = 1 << iota
	stReadable
	stWritable
)

// Options size a connection; zero fields take librdmacm's defaults.
type Options struct {
	// SendBuffer and RecvBuffer are the bytes of each ring (SO_SNDBUF and
	// SO_RCVBUF doubled, as librdmacm keeps them); 0 means 128 KiB.
	SendBuffer, RecvBuffer int
	// QueueDepth is the send and receive queues' depth; 0 means 384.
	QueueDepth int
	// MaxInline is the largest message sent inline; 0 means 64.
	MaxInline int
}

func (o *Options) sizes() (sbuf, rbuf, depth, inline int) {
	if o == nil {
		o = &Options{}
	}
	sbuf, rbuf, depth, inline = o.SendBuffer, o.RecvBuffer, o.QueueDepth, o.MaxInline
	if sbuf <= 0 {
		sbuf = defaultBuf
	}
	if rbuf <= 0 {
		rbuf = defaultBuf
	}
	sbuf, rbuf = max(sbuf, 2*sndLowat), max(rbuf&^1, 2*sndLowat)
	if depth <= 0 {
		depth = defaultQueue
	}
	depth = min(max(depth, minQueue), 0xFFFE)
	if inline <= 0 {
		inline = 64
	}
	return sbuf, rbuf, depth, max(inline, sgeLen)
}

// Conn is an rsocket connection: a net.Conn over an RC queue pair.
type Conn struct {
	pd         *verbsapi.PD
	cq         *verbsapi.CQ
	qp         *verbsapi.QP
	cm         *verbsapi.CMConn
	smr, rmr   *verbsapi.MR
	tmr        *verbsapi.MR // our target SGL: the peer writes it
	local, rem *net.TCPAddr
	stop       context.CancelFunc
	done       chan struct{} // the completion goroutine has ended

	wmu sync.Mutex // one Write at a time: writes do not interleave

	mu        sync.Mutex
	wake      chan struct{} // closed and replaced at a change someone waits for
	waiters   int
	state     int
	closed    bool
	readShut  bool  // CloseRead: what arrives is dropped
	cmDone    bool  // rdma_cm's disconnection is answered
	dreq      bool  // the peer's DREQ came: its QP is being flushed
	failed    error // why the connection failed
	readDL    time.Time
	writeDL   time.Time
	depth     int
	inline    int
	peerOrder binary.ByteOrder

	// Scratch for posting, under mu (writeWR).
	wr     verbsapi.SendWR
	sgl    [2]verbsapi.SGE
	sgeBuf [sgeLen]byte

	// Send side.
	sqeAvail         int
	ctrlSeq, ctrlMax uint32
	sseqNo, sseqComp uint16
	sbufAvail, shead int
	tgt              [sglEntries]sge // our copy of the target SGL
	tgtIdx           int
	tgtNext          int // the entry the peer's next SGL write fills
	peerData         sge // the peer's first target, for InjectForTest
	remoteSGL        sge
	remoteIdx        uint32

	// Receive side.
	rseqNo, rseqComp uint16
	rbufAvail        int // free and not yet granted
	rbufFree         int // where the next granted half starts
	rbufOff          int // next byte to read
	rmsg             []int
	rhead, rtail     int
}

const recvID = 1 << 63

// defaultCloseWait bounds how long Close waits for rdma_cm's DREP.
const defaultCloseWait = 2 * time.Second

// newConn makes the queue pair and buffers of a connection, its QP in INIT
// with every receive posted, ready for DialCM or ConnRequest.Accept.
func newConn(vc *verbsapi.Context, o *Options) (c *Conn, err error) {
	sbuf, rbuf, depth, inline := o.sizes()
	c = &Conn{depth: depth, inline: inline, wake: make(chan struct{}), done: make(chan struct{})}
	defer func() {
		if err != nil {
			c.release()
		}
	}()
	if c.pd, err = vc.AllocPD(); err != nil {
		return nil, err
	}
	if c.cq, err = vc.CreateCQ(2*depth, nil); err != nil {
		return nil, err
	}
	c.qp, err = c.pd.CreateQP(verbsapi.QPInitAttr{SendCQ: c.cq, RecvCQ: c.cq, QPType: verbsapi.RC, SigAll: true,
		Cap: verbsapi.QPCap{MaxSendWR: depth, MaxRecvWR: depth, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInline: inline}})
	if err != nil {
		return nil, err
	}
	remote := verbsapi.AccessLocalWrite | verbsapi.AccessRemoteWrite
	if c.smr, err = c.pd.RegMR(make([]byte, sbuf), verbsapi.AccessLocalWrite); err != nil {
		return nil, err
	}
	if c.rmr, err = c.pd.RegMR(make([]byte, rbuf), remote); err != nil {
		return nil, err
	}
	if c.tmr, err = c.pd.RegMR(make([]byte, sglEntries*sgeLen), remote); err != nil {
		return nil, err
	}
	if err = c.qp.Modify(&verbsapi.QPAttr{State: verbsapi.QPSInit, Port: 1, AccessFlags: verbsapi.AccessRemoteWrite},
		verbsapi.QPAttrState|verbsapi.QPAttrPKeyIndex|verbsapi.QPAttrPort|verbsapi.QPAttrAccessFlags); err != nil {
		return nil, err
	}
	for range depth {
		if err = c.qp.PostRecv(&verbsapi.RecvWR{ID: recvID}); err != nil {
			return nil, err
		}
	}
	c.rmsg = make([]int, depth+1)
	c.sbufAvail = sbuf
	c.rbufFree, c.rbufAvail = rbuf/2, rbuf/2
	c.sqeAvail = depth - ctrlWQEs
	c.ctrlMax = ctrlWQEs
	c.rseqComp = uint16(depth / 2)
	return c, nil
}

// connData is what this side tells the peer.
func (c *Conn) connData() []byte {
	f := uint8(flagIOMap)
	if hostBigEndian {
		f |= flagNet
	}
	return connData{flags: f, credits: uint16(c.depth),
		targetSGL:  sge{addr: c.tmr.Addr(), key: c.tmr.RKey(), length: sglEntries},
		dataBuffer: sge{addr: c.rmr.Addr(), key: c.rmr.RKey(), length: uint32(c.rmr.Len() / 2)}}.encode()
}

// start takes the peer's connection data and starts the completion
// goroutine.
func (c *Conn) start(cm *verbsapi.CMConn, peer connData) {
	c.cm = cm
	c.local = tcpAddr(cm.LocalAddr())
	c.rem = tcpAddr(cm.PeerAddr())
	c.peerOrder = binary.ByteOrder(binary.LittleEndian)
	if peer.flags&flagNet != 0 {
		c.peerOrder = binary.BigEndian
	}
	c.remoteSGL = peer.targetSGL
	c.remoteIdx = 1 % c.remoteSGL.length
	c.tgt[0] = peer.dataBuffer
	c.peerData = peer.dataBuffer
	c.tgtNext = 1
	c.sseqComp = peer.credits
	c.state = stConnected | stReadable | stWritable
	ctx, stop := context.WithCancel(context.Background())
	c.stop = stop
	go c.run(ctx)
}

// notify wakes every waiter. Called with mu held. With none waiting (the
// common case at every completion) it costs nothing.
func (c *Conn) notify() {
	if c.waiters == 0 {
		return
	}
	close(c.wake)
	c.wake = make(chan struct{})
}

// waitChange waits, with mu held, for the next notify or until until
// (zero: no limit).
func (c *Conn) waitChange(until time.Time) {
	var timeout <-chan time.Time
	if !until.IsZero() {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		timeout = t.C
	}
	wake := c.wake
	c.waiters++
	c.mu.Unlock()
	select {
	case <-wake:
	case <-timeout:
	}
	c.mu.Lock()
	c.waiters--
}

// await waits, with mu held, until ready is true, the deadline dl passes
// or the connection is closed.
func (c *Conn) await(dl *time.Time, ready func() bool) error {
	// A deadline already past fails the call even when it could proceed,
	// as a socket's does.
	if !dl.IsZero() && !time.Now().Before(*dl) {
		return os.ErrDeadlineExceeded
	}
	for !ready() {
		switch {
		case c.closed:
			return net.ErrClosed
		case !dl.IsZero() && !time.Now().Before(*dl):
			return os.ErrDeadlineExceeded
		}
		c.waitChange(*dl)
	}
	return nil
}

func (c *Conn) opErr(op string, err error) error {
	return &net.OpError{Op: op, Net: "rsocket", Source: c.local, Addr: c.rem, Err: err}
}

func (c *Conn) canSend() bool {
	return c.sqeAvail > 0 && c.sbufAvail >= sndLowat && c.sseqNo != c.sseqComp && c.tgt[c.tgtIdx].length != 0
}

func (c *Conn) haveData() bool { return c.rhead != c.rtail }

// Read reads what the peer sent; io.EOF once it shut down or closed and
// everything before is read.
func (c *Conn) Read(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, c.opErr("read", net.ErrClosed)
	}
	if len(b) == 0 {
		return 0, nil
	}
	if err := c.await(&c.readDL, func() bool { return c.haveData() || c.state&stReadable == 0 }); err != nil {
		return 0, c.opErr("read", err)
	}
	// A failed connection delivers nothing more: what a peer that broke
	// the protocol queued is not data. A peer that left in order (its
	// DISCONNECT, rdma_cm's DREQ) is read to the end.
	if c.failed != nil {
		return 0, c.opErr("read", c.failed)
	}
	if !c.haveData() {
		return 0, io.EOF
	}
	n := c.consume(b)
	c.updateCredits()
	return n, nil
}

// consume copies queued data into b. Called with mu held.
func (c *Conn) consume(b []byte) int {
	rbuf := c.rmr.Bytes()
	n := 0
	for n < len(b) && c.haveData() {
		take := min(c.rmsg[c.rhead], len(b)-n)
		first := min(take, len(rbuf)-c.rbufOff)
		copy(b[n:], rbuf[c.rbufOff:c.rbufOff+first])
		copy(b[n+first:], rbuf[:take-first])
		c.rbufOff = (c.rbufOff + take) % len(rbuf)
		c.rbufAvail += take
		n += take
		if c.rmsg[c.rhead] -= take; c.rmsg[c.rhead] == 0 {
			c.rseqNo++
			c.rhead = (c.rhead + 1) % len(c.rmsg)
		}
	}
	return n
}

// Write sends b, blocking while the peer has no room for it.
func (c *Conn) Write(b []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	n, olen := 0, firstXfer
	for n < len(b) {
		if c.closed {
			return n, c.opErr("write", net.ErrClosed)
		}
		if err := c.await(&c.writeDL, func() bool { return c.canSend() || c.state&stWritable == 0 }); err != nil {
			return n, c.opErr("write", err)
		}
		if c.state&stWritable == 0 {
			return n, c.opErr("write", c.writeErr())
		}
		left := len(b) - n
		xfer := left
		if olen < left {
			xfer = olen
			if olen < maxXfer {
				olen <<= 1
			}
		}
		xfer = min(xfer, c.sbufAvail, int(c.tgt[c.tgtIdx].length))
		if err := c.postData(b[n : n+xfer]); err != nil {
			c.fail(err)
			return n, c.opErr("write", err)
		}
		n += xfer
	}
	return n, nil
}

// writeErr says why writing is over: our own shutdown, the peer leaving,
// or a failure.
func (c *Conn) writeErr() error {
	switch {
	case c.failed != nil:
		return c.failed
	case c.state&stConnected != 0:
		return syscall.EPIPE
	}
	return syscall.ECONNRESET
}

// postData writes p into the peer's current target, with an immediate
// that says so. Called with mu held.
func (c *Conn) postData(p []byte) error {
	t := &c.tgt[c.tgtIdx]
	wr := c.writeWR(msg(opData, uint32(len(p))), t.addr, t.key)
	if len(p) <= c.inline {
		wr.Flags, wr.Inline = verbsapi.SendInline, p
	} else {
		sbuf := c.smr.Bytes()
		first := min(len(p), len(sbuf)-c.shead)
		copy(sbuf[c.shead:], p[:first])
		c.sgl[0] = c.smr.SGE(c.shead, first)
		wr.SGL = c.sgl[:1]
		if first < len(p) {
			copy(sbuf, p[first:])
			c.sgl[1] = c.smr.SGE(0, len(p)-first)
			wr.SGL = c.sgl[:2]
		}
		c.shead = (c.shead + len(p)) % len(sbuf)
	}
	t.addr += uint64(len(p))
	t.length -= uint32(len(p))
	if t.length == 0 {
		c.tgtIdx = (c.tgtIdx + 1) % sglEntries
	}
	c.sseqNo++
	c.sqeAvail--
	c.sbufAvail -= len(p)
	return c.qp.PostSend(wr)
}

// writeWR fills c's one work request (every post is made under mu, and
// PostSend copies what it keeps) as an RDMA WRITE WITH IMMEDIATE m: no
// allocation per message.
func (c *Conn) writeWR(m uint32, addr uint64, rkey uint32) *verbsapi.SendWR {
	c.wr = verbsapi.SendWR{ID: uint64(m), Opcode: verbsapi.WRWriteImm, Imm: m, RemoteAddr: addr, RKey: rkey}
	return &c.wr
}

// updateCredits grants the peer more messages and, when half the receive
// buffer is free, that half. Called with mu held.
func (c *Conn) updateCredits() {
	half := c.rmr.Len() / 2
	if c.state&stConnected == 0 || c.ctrlSeq == c.ctrlMax ||
		(c.rbufAvail < half && int16(c.rseqNo-c.rseqComp) < 0) {
		return
	}
	c.ctrlSeq++
	c.rseqComp = c.rseqNo + uint16(c.depth/2)
	wr := c.writeWR(msg(opSGL, uint32(c.rseqNo+uint16(c.depth))), 0, 0)
	if c.rbufAvail >= half {
		putSGE(c.sgeBuf[:], sge{addr: c.rmr.Addr() + uint64(c.rbufFree), key: c.rmr.RKey(), length: uint32(half)}, c.peerOrder)
		wr.Flags, wr.Inline = verbsapi.SendInline, c.sgeBuf[:]
		wr.RemoteAddr = c.remoteSGL.addr + uint64(c.remoteIdx)*sgeLen
		wr.RKey = c.remoteSGL.key
		c.rbufAvail -= half
		c.rbufFree = (c.rbufFree + half) % c.rmr.Len()
		c.remoteIdx = (c.remoteIdx + 1) % c.remoteSGL.length
	}
	if err := c.qp.PostSend(wr); err != nil {
		c.fail(err)
	}
}

// sendCtrl posts a control message if a control WQE is free. mu held.
func (c *Conn) sendCtrl(ctrl uint32) {
	if c.state&stConnected == 0 || c.ctrlSeq == c.ctrlMax {
		return
	}
	c.ctrlSeq++
	if err := c.qp.PostSend(c.writeWR(msg(opCtrl, ctrl), 0, 0)); err != nil {
		c.fail(err)
	}
}

// fail ends the connection for err, flushing the QP so that the peer's
// writes stop landing. Called with mu held.
func (c *Conn) fail(err error) {
	if c.failed == nil {
		c.failed = err
	}
	if c.state&stConnected != 0 {
		c.state = 0
		_ = c.qp.Modify(&verbsapi.QPAttr{State: verbsapi.QPSErr}, verbsapi.QPAttrState)
	}
	c.notify()
}

// CloseWrite shuts down the sending side (the peer reads io.EOF); reading
// goes on.
func (c *Conn) CloseWrite() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.opErr("close", net.ErrClosed)
	}
	if c.state&stWritable == 0 {
		return nil
	}
	c.state &^= stWritable
	if c.state&stReadable != 0 {
		c.sendCtrl(ctrlShutdown)
	} else {
		c.sendCtrl(ctrlDisconnect)
	}
	c.notify()
	return nil
}

// CloseRead stops reading; what the peer sends after is dropped.
func (c *Conn) CloseRead() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.opErr("close", net.ErrClosed)
	}
	c.state &^= stReadable
	c.readShut = true
	c.notify()
	return nil
}

// Close tells the peer (a DISCONNECT message, then rdma_cm's DREQ), waits
// up to a second for what was written to be delivered, and frees the QP
// and buffers. Blocked Reads and Writes return net.ErrClosed.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return c.opErr("close", net.ErrClosed)
	}
	c.closed = true
	if c.state&stConnected != 0 {
		c.sendCtrl(ctrlDisconnect)
		c.state &^= stReadable | stWritable
	}
	c.notify()
	deadline := time.Now().Add(time.Second)
	for c.state&stConnected != 0 && int(c.ctrlMax-c.ctrlSeq)+c.sqeAvail != c.depth && time.Now().Before(deadline) {
		c.waitChange(deadline)
	}
	answered := c.cmDone
	c.cmDone = true
	c.mu.Unlock()
	var err error
	if !answered {
		ctx, cancel := context.WithTimeout(context.Background(), defaultCloseWait)
		defer cancel()
		err = c.cm.Disconnect(ctx)
	}
	c.stop()
	<-c.done
	c.release()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return c.opErr("close", err)
	}
	return nil
}

// release frees what newConn made.
func (c *Conn) release() {
	if c.qp != nil {
		_ = c.qp.Destroy()
	}
	for _, m := range []*verbsapi.MR{c.smr, c.rmr, c.tmr} {
		if m != nil {
			_ = m.Dereg()
		}
	}
	if c.cq != nil {
		_ = c.cq.Destroy()
	}
	if c.pd != nil {
		_ = c.pd.Dealloc()
	}
}

// LocalAddr and RemoteAddr are the rdma_cm addresses (IP and port) of the
// two ends.
func (c *Conn) LocalAddr() net.Addr  { return c.local }
func (c *Conn) RemoteAddr() net.Addr { return c.rem }

// SetDeadline, SetReadDeadline and SetWriteDeadline set when blocked and
// later calls give up (os.ErrDeadlineExceeded); waiters look again at once.
func (c *Conn) SetDeadline(t time.Time) error      { return c.setDeadlines(t, &c.readDL, &c.writeDL) }
func (c *Conn) SetReadDeadline(t time.Time) error  { return c.setDeadlines(t, &c.readDL) }
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.setDeadlines(t, &c.writeDL) }

func (c *Conn) setDeadlines(t time.Time, dls ...*time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, dl := range dls {
		*dl = t
	}
	c.notify()
	return nil
}

func (c *Conn) String() string {
	return fmt.Sprintf("rsocket %v->%v qp %d", c.local, c.rem, c.qp.QPN())
}

// InjectForTest posts an RDMA WRITE on c's queue pair as it is told,
// outside every rule of the protocol: with the immediate imm (when
// withImm), payload sent inline, to remoteAddr and rkey. It exists to
// test how peers (softroce's C rsockets, librdmacm's) defend themselves
// against a peer that breaks the protocol; nothing else should call it.
func (c *Conn) InjectForTest(imm uint32, withImm bool, payload []byte, remoteAddr uint64, rkey uint32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	op := verbsapi.WRWrite
	if withImm {
		op = verbsapi.WRWriteImm
	}
	// wr_id as a control message's: its completion gives a control WQE
	// back, which it did not take.
	c.ctrlSeq++
	return c.qp.PostSend(&verbsapi.SendWR{ID: uint64(msg(opCtrl, ctrlKeepalive)), Opcode: op, Imm: imm,
		Flags: verbsapi.SendInline, Inline: payload, RemoteAddr: remoteAddr, RKey: rkey})
}

// PeerDataBuffer is the receive buffer the peer's connection data named
// (its first half): where its data goes, for InjectForTest.
func (c *Conn) PeerDataBuffer() (addr uint64, rkey, length uint32) {
	return c.peerData.addr, c.peerData.key, c.peerData.length
}
