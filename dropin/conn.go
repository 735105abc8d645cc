package dropin

// conn.go: one client connection, which is one ibv_context of a
// program. The connection names the objects it creates by handles of its
// own, so that a program can reach only what it created, and it destroys
// them all when the program goes away, crashed or not.

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/softroce/softroce/verbsapi"
)

// conn is the server's side of one connection.
type conn struct {
	d   *Server
	ctx *verbsapi.Context // the program's own verbs context
	pid int32             // the program's, for log lines
	w   *wire
	// outFD is the descriptor to send with the current answer, or -1;
	// with ownOut the connection closes it once sent (releaseOut).
	outFD  int
	ownOut bool

	// mu guards the tables and the event queues: the serve goroutine
	// holds it for a whole call, event goroutines briefly.
	mu    sync.Mutex
	next  uint32 // last handle given out
	pds   map[uint32]*verbsapi.PD
	mrs   map[uint32]*connMR
	mws   map[uint32]*verbsapi.MW
	chans map[uint32]*connChan
	cqs   map[uint32]*connCQ
	qps   map[uint32]*connQP
	srqs  map[uint32]*connSRQ
	ahs   map[uint32]*verbsapi.AH
	async eventQueue[wireAsyncEvent]
	// owners maps the connection's QPs, CQs and SRQs to their handles,
	// for the events about them.
	owners owners
	// reason is why the current call failed, when it failed on an error
	// with more to say than its errno (see errnoOf), for the log.
	reason error
	// mrBytes counts the bytes of the connection's region mappings, up
	// to maxConnMRBytes (mrlimit.go).
	mrBytes uint64
	// mrMaps counts the memory mappings of those regions, up to
	// maxConnMRMaps (mrlimit.go).
	mrMaps int64
	// queueBytes counts the memory of the connection's queues, up to
	// maxConnQueueBytes (queuelimit.go).
	queueBytes int64
	// cm is the connection's rdma_cm state (cm.go), made on first use.
	cm *cmSession

	// The rings (wqring.go): the QPs that have them, whether the poller
	// sleeps (asleep: the device's goroutines read it too, without mu),
	// whether a QP may have entered the error state since it last looked
	// (errSeen), its doorbell (an eventfd; bellFD its descriptor, -1
	// before it is made and once the poller stops, under bellMu, for
	// kickPoller's goroutines) and its stop and done signals.
	ringQPs  []*connQP
	asleep   atomic.Bool
	errSeen  atomic.Bool
	bell     *os.File
	bellMu   sync.Mutex
	bellFD   int
	pollStop chan struct{}
	pollDone chan struct{}

	// Scratch for the data path, reused from call to call.
	wcs     []verbsapi.WC
	sges    []verbsapi.SGE
	sendWR  verbsapi.SendWR
	recvWR  verbsapi.RecvWR
	slotBuf []byte // a ring slot being read (wqring.go)

	// regions indexes the program's region mappings by file, for regions
	// that can share one (mrshare.go).
	regions map[fileID][]*regionMap
}

type connMR struct {
	mr  *verbsapi.MR
	mem *mrMapping
}

type connCQ struct {
	cq          *verbsapi.CQ
	ring        *cqRing // where the device writes its completions
	bytes       int64   // queue memory charged (queuelimit.go)
	channel     uint32  // comp channel handle, or srNone
	compEvents  uint32  // delivered by GET_CQ_EVENT
	asyncEvents uint32  // delivered by GET_ASYNC_EVENT
}

type connQP struct {
	qp     *verbsapi.QP
	rings  *qpRings     // its send and receive rings (wqring.go)
	bytes  int64        // queue memory charged (queuelimit.go)
	init   wireCreateQP // handles and granted caps, for QUERY_QP
	events uint32       // async events delivered
}

type connSRQ struct {
	srq    *verbsapi.SRQ
	ring   *wqRing // the program posts here too (wqring.go)
	bytes  int64   // queue memory charged (queuelimit.go)
	events uint32  // async events delivered
}

func newConn(d *Server, ctx *verbsapi.Context, uc *net.UnixConn) *conn {
	c := &conn{
		d: d, ctx: ctx, w: newWire(uc), outFD: -1, bellFD: -1,
		pds: map[uint32]*verbsapi.PD{}, mrs: map[uint32]*connMR{}, mws: map[uint32]*verbsapi.MW{},
		chans: map[uint32]*connChan{}, cqs: map[uint32]*connCQ{}, qps: map[uint32]*connQP{},
		srqs: map[uint32]*connSRQ{}, ahs: map[uint32]*verbsapi.AH{}, async: newEventQueue[wireAsyncEvent](),
	}
	c.owners.init()
	if cred, ok := peerCred(uc); ok {
		c.pid = cred.Pid
	}
	return c
}

// handle returns a new handle. Handles grow from 1 and are not reused
// (2^32 - 2 objects per connection), so a stale handle names nothing
// rather than a newer object; 0 is never given out, nor SR_NONE.
func (c *conn) handle() uint32 {
	c.next++
	if c.next == srNone {
		c.next = 1
	}
	return c.next
}

// serve answers one program's calls until it hangs up or breaks the
// framing, then destroys what the program left.
func (d *Server) serve(uc *net.UnixConn) {
	ctx, err := d.Device.Open()
	if err != nil {
		d.logf("refused a program: %v", err)
		return
	}
	c := newConn(d, ctx, uc)
	events := make(chan struct{})
	go func() {
		defer close(events)
		c.routeAsyncEvents()
	}()
	defer func() {
		c.cleanup()
		<-events // the context's Close, in cleanup, ends the routing
	}()
	var r request
	for {
		if err := c.w.read(&r); err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				d.logf("program pid %d: dropped: %v", c.pid, err)
			}
			return
		}
		errno, err := c.run(&r)
		// Descriptors are only ever borrowed: REG_MR maps them, nobody
		// keeps them.
		r.closeFDs()
		if err != nil {
			d.logf("program pid %d: dropped: %v", c.pid, err)
			return
		}
		if errno != 0 && errno != syscall.EAGAIN {
			c.logRefused(&r, errno)
		}
		fd := c.outFD
		if errno != 0 {
			fd = -1
			if !carriesPostResp(r.op) {
				c.w.reset()
				if c.reason != nil {
					c.w.putReason(c.reason.Error())
				}
			}
		}
		err = c.w.send(errno, fd)
		c.releaseOut()
		if err != nil {
			return
		}
	}
}

// sendFD makes fd, the connection's own, go with the current answer; it
// is closed once sent, or unsent by a failure, at the latest by the next
// call.
func (c *conn) sendFD(fd int) { c.outFD, c.ownOut = fd, true }

// releaseOut forgets the answer's descriptor, closing it when it was the
// connection's own (sendFD) rather than borrowed.
func (c *conn) releaseOut() {
	if c.ownOut && c.outFD >= 0 {
		unix.Close(c.outFD)
	}
	c.outFD, c.ownOut = -1, false
}

// run runs one call under c.mu. A panic in a handler is a daemon bug; it
// costs the one client its connection (and its objects), not the daemon.
func (c *conn) run(r *request) (errno syscall.Errno, err error) {
	c.w.reset()
	c.releaseOut()
	c.reason = nil
	c.mu.Lock()
	defer c.mu.Unlock()
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("op %d: panic: %v\n%s", r.op, p, debug.Stack())
		}
	}()
	return c.call(r), nil
}

// carriesPostResp reports whether op's answer has a body even on failure.
func carriesPostResp(op uint32) bool {
	return op == opPostSend || op == opPostRecv || op == opPostSRQRecv
}

// call runs one request, appending the answer body to c.w. Called with
// c.mu held.
func (c *conn) call(r *request) syscall.Errno {
	if r.truncated || (len(r.fds) > 0 && r.op != opRegMR && r.op != opReregMR) {
		return syscall.EINVAL
	}
	b := r.body
	// A call sees the QPs as the program posted to them: what waits in
	// their rings goes first.
	if len(c.ringQPs) > 0 || len(c.srqs) > 0 {
		c.drainRingsLocked()
	}
	switch r.op {
	case opList, opQueryDevice, opQueryPort, opQueryGID, opQueryPKey:
		return c.query(r.op, b)
	case opAsyncFD:
		return c.asyncFD(b)
	case opGetAsyncEvent:
		return c.getAsyncEvent(b)
	case opAllocPD:
		return c.allocPD(b)
	case opDeallocPD:
		return c.deallocPD(b)
	case opRegMR:
		return c.regMR(b, r.fds)
	case opDeregMR:
		return c.deregMR(b)
	case opReregMR:
		return c.reregMR(b, r.fds)
	case opAllocMW:
		return c.allocMW(b)
	case opDeallocMW:
		return c.deallocMW(b)
	case opCreateCompChannel:
		return c.createCompChannel(b)
	case opDestroyCompChannel:
		return c.destroyCompChannel(b)
	case opGetCQEvent:
		return c.getCQEvent(b)
	case opCreateCQ:
		return c.createCQ(b)
	case opDestroyCQ:
		return c.destroyCQ(b)
	case opResizeCQ:
		return c.resizeCQ(b)
	case opPollCQ:
		return c.pollCQ(b)
	case opReqNotifyCQ:
		return c.reqNotifyCQ(b)
	case opCreateQP:
		return c.createQP(b)
	case opModifyQP:
		errno := c.modifyQP(b)
		c.kickPoller() // the QP may be in the error state now
		return errno
	case opQueryQP:
		return c.queryQP(b)
	case opDestroyQP:
		return c.destroyQP(b)
	case opPostSend:
		return c.postSend(b)
	case opPostRecv:
		return c.postRecv(b, false)
	case opDoorbell:
		return c.doorbellFD(b)
	case opPostSRQRecv:
		return c.postRecv(b, true)
	case opCreateSRQ:
		return c.createSRQ(b)
	case opModifySRQ:
		return c.modifySRQ(b)
	case opQuerySRQ:
		return c.querySRQ(b)
	case opDestroySRQ:
		return c.destroySRQ(b)
	case opCreateAH:
		return c.createAH(b)
	case opCMCreateChannel:
		return c.cmCreateChannel(r.body)
	case opCMDestroyChannel:
		return c.cmDestroyChannel(r.body)
	case opCMCreateID:
		return c.cmCreateID(r.body)
	case opCMDestroyID:
		return c.cmDestroyID(r.body)
	case opCMBind:
		return c.cmBind(r.body)
	case opCMResolveAddr:
		return c.cmResolveAddr(r.body)
	case opCMResolveRoute:
		return c.cmResolveRoute(r.body)
	case opCMQueryRoute:
		return c.cmQueryRoute(r.body)
	case opCMListen:
		return c.cmListen(r.body)
	case opCMConnect:
		return c.cmConnect(r.body)
	case opCMAccept:
		return c.cmAccept(r.body)
	case opCMReject:
		return c.cmReject(r.body)
	case opCMDisconnect:
		return c.cmDisconnect(r.body)
	case opCMEstablish:
		return c.cmEstablish(r.body)
	case opCMInitQPAttr:
		return c.cmInitQPAttr(r.body)
	case opCMGetEvent:
		return c.cmGetEvent(r.body)
	case opCMSetOption:
		return c.cmSetOption(r.body)
	case opCMMigrate:
		return c.cmMigrate(r.body)
	case opDestroyAH:
		return c.destroyAH(b)
	}
	return syscall.EOPNOTSUPP
}

// unmapRing releases the SRQ's ring once the device no longer takes from
// it (the SRQ destroyed).
func (s *connSRQ) unmapRing() {
	if s.ring != nil {
		s.srq.SetRecvRefill(nil)
		s.srq.SetQueueWatch(nil)
		unix.Munmap(s.ring.mem)
		s.ring = nil
	}
}

// handleArg decodes a body that is one struct sr_handle.
func handleArg(b []byte) (uint32, bool) {
	var h wireHandle
	ok := decode(b, &h)
	return h.Handle, ok
}

// cleanup destroys everything the connection still owns, children before
// parents (QPs, SRQs, AHs, MWs, MRs, CQs, comp channels, PDs; windows
// before regions, which cannot go while one is bound), so that a program
// that died leaves the device as it found it. Errors are ignored: there is
// nobody left to tell, and each object is tried regardless.
func (c *conn) cleanup() {
	c.stopPoller()
	c.mu.Lock()
	defer c.mu.Unlock()
	for h, q := range c.qps {
		if q.qp.Destroy() == nil && q.rings != nil {
			c.dropRingQP(q)
		}
		c.owners.drop(q.qp)
		delete(c.qps, h)
	}
	var srqRings []*connSRQ // of SRQs not destroyed yet: unmapped after Close
	for h, s := range c.srqs {
		if s.srq.Destroy() == nil {
			s.unmapRing()
		} else {
			srqRings = append(srqRings, s)
		}
		c.owners.drop(s.srq)
		delete(c.srqs, h)
	}
	for h, a := range c.ahs {
		a.Destroy()
		delete(c.ahs, h)
	}
	for h, w := range c.mws {
		w.Dealloc()
		delete(c.mws, h)
	}
	for h, m := range c.mrs {
		if m.mr.Dereg() == nil {
			m.mem.unmap()
		}
		delete(c.mrs, h)
	}
	var rings []*cqRing // of CQs not destroyed yet: unmapped after Close
	for h, cq := range c.cqs {
		if cq.cq.Destroy() == nil {
			cq.ring.unmap()
		} else {
			rings = append(rings, cq.ring)
		}
		c.owners.drop(cq.cq)
		delete(c.cqs, h)
	}
	for h, ch := range c.chans {
		ch.close()
		delete(c.chans, h)
	}
	for h, pd := range c.pds {
		pd.Dealloc()
		delete(c.pds, h)
	}
	c.releaseOut()
	c.async.close()
	if c.cm != nil {
		c.cm.close(c)
	}
	// Whatever the loops above could not destroy (a destroy that failed),
	// the context's Close takes with it.
	c.ctx.Close()
	for _, r := range rings {
		r.unmap()
	}
	for _, q := range c.ringQPs {
		q.rings.unmap()
	}
	c.ringQPs = nil
	for _, s := range srqRings {
		s.unmapRing()
	}
	c.d.queueBytes.Add(-c.queueBytes)
	c.queueBytes = 0
}

// refuse fails the current call with errno for the reason the format
// gives, which the log line and the library's SOFTROCE_DEBUG output show.
func (c *conn) refuse(errno syscall.Errno, format string, args ...any) syscall.Errno {
	c.reason = fmt.Errorf(format, args...)
	return errno
}

// logRefused logs a refused request with its reason, rate-limited: the
// program sees only the errno.
func (c *conn) logRefused(r *request, errno syscall.Errno) {
	why := "malformed or inconsistent request"
	if c.reason != nil {
		why = c.reason.Error()
	}
	c.d.logf("program pid %d: %s refused: %v (%s)", c.pid, opName(r.op), errno, why)
}
