package verbsapi

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/packet"
)

// The rdma_cm layer over the device's connection manager (package cm): what
// librdmacm gives C programs, for Go. A passive side listens on an rdma_cm
// TCP port (ListenCM) and accepts requests; an active side dials an IP
// address and port with a QP (DialCM). Both ends program their QPs the way
// the kernel's rdma_cm does from the REQ and REP (reference/rdma-cm.md
// §1.6), so softroce and kernel rxe connect either way: a kernel rping or
// rdma_server can be the peer.

// Errors of the rdma_cm layer, for errors.Is.
var (
	// ErrUnreachable: the peer did not answer the REQ (or REP) within
	// its retries (RDMA_CM_EVENT_UNREACHABLE).
	ErrUnreachable = errors.New("rdma_cm: peer unreachable")
	// ErrRejected: the peer refused (RDMA_CM_EVENT_REJECTED); the error is
	// a *RejectError with the reason.
	ErrRejected = errors.New("rdma_cm: connection rejected")
	// ErrPortInUse: the rdma_cm port is taken on this device.
	ErrPortInUse = errors.New("rdma_cm: port in use")
)

// RejectError is a refusal with its REJ reason and private data.
type RejectError struct {
	Reason      packet.CMRejReason
	PrivateData []byte
}

func (e *RejectError) Error() string {
	hint := ""
	switch e.Reason {
	case packet.RejInvalidServiceID:
		hint = " (nothing listens on that port)"
	case packet.RejConsumerDefined:
		hint = " (the peer's program refused)"
	}
	return fmt.Sprintf("rdma_cm: connection rejected: %v, reason %d%s", e.Reason, uint16(e.Reason), hint)
}

func (e *RejectError) Is(target error) bool { return target == ErrRejected }

// CMParam is what a side asks for in a connection, as struct
// rdma_conn_param. Zero fields take the defaults named.
type CMParam struct {
	// PrivateData goes in the REQ (at most 56 bytes after rdma_cm's
	// header) or the REP (at most 196).
	PrivateData []byte
	// ResponderResources is how many READ/atomic requests this side
	// serves at once; InitiatorDepth how many it issues. Dial: 0 means 16;
	// Accept: 0 means what the REQ asked.
	ResponderResources, InitiatorDepth uint8
	// RetryCount and RNRRetryCount: 0 means 7.
	RetryCount, RNRRetryCount uint8
}

// rdma_cm's fixed values on RoCE (cma.c).
const (
	cmAckTimeout = cm.PacketLifetime + 1 // cm_ack_timeout(rxe's 15, 18): the QP's timeout, 2.1 s
	cmHopLimit   = 64
)

// CMConn is a connection made by DialCM or ConnRequest.Accept: its QP is in
// RTS, connected to the peer's.
type CMConn struct {
	ctx         *Context
	r           *cmRouter
	id          cm.ConnID
	qp          *QP
	local, peer netip.AddrPort
	ownPort     bool // an ephemeral port this connection bound
	sink        *cmSink
	// PrivateData is what the peer sent with its REP (active side) or REQ
	// (passive side).
	PrivateData []byte
}

// QP returns the connection's QP.
func (c *CMConn) QP() *QP { return c.qp }

// LocalAddr and PeerAddr are the rdma_cm addresses of the two ends.
func (c *CMConn) LocalAddr() netip.AddrPort { return c.local }
func (c *CMConn) PeerAddr() netip.AddrPort  { return c.peer }

// Done is closed when the peer asks to disconnect
// (RDMA_CM_EVENT_DISCONNECTED); answer with Disconnect.
func (c *CMConn) Done() <-chan struct{} { return c.sink.done }

// Disconnect moves the QP to the error state (flushing its work requests)
// and ends the connection: a DREQ, waiting for the peer's DREP until ctx
// ends, or, when the peer asked first, the DREP.
func (c *CMConn) Disconnect(ctx context.Context) error {
	if err := c.qp.Modify(&QPAttr{State: QPSErr}, QPAttrState); err != nil {
		return fmt.Errorf("disconnect: qp %d to ERR: %w", c.qp.QPN(), err)
	}
	var err error
	c.r.dev.WithCM(c.r.dev.Now(), func(m *cm.Manager, now cm.Time) {
		answer := m.State(c.id) == cm.StateDreqRcvd
		err = m.Disconnect(now, c.id, nil)
		if answer {
			err = errAnswered{err}
		}
	})
	defer c.release()
	var ans errAnswered
	if errors.As(err, &ans) {
		return ans.err
	}
	if err != nil {
		return fmt.Errorf("disconnect from %s: %w", c.peer, err)
	}
	for {
		e, err := c.wait(ctx)
		if err != nil {
			return fmt.Errorf("disconnect from %s: %w", c.peer, err)
		}
		if e.Kind == cm.EventDisconnected || e.Kind == cm.EventTimewaitExit {
			return nil
		}
	}
}

// errAnswered marks a Disconnect that answered the peer's DREQ.
type errAnswered struct{ err error }

func (e errAnswered) Error() string { return fmt.Sprint(e.err) }

// release gives back an ephemeral port.
func (c *CMConn) release() {
	if c.ownPort {
		c.r.release(c.local.Port())
		c.ownPort = false
	}
}

// wait returns the connection's next event.
func (c *CMConn) wait(ctx context.Context) (cm.Event, error) {
	select {
	case <-ctx.Done():
		return cm.Event{}, ctx.Err()
	case e := <-c.sink.ch:
		return e, nil
	}
}

// newConn registers a connection's events. Called with r.mu held.
func (r *cmRouter) newConn(ctx *Context, id cm.ConnID, q *QP) *CMConn {
	return &CMConn{ctx: ctx, r: r, id: id, qp: q, sink: r.addConn(id)}
}

// cmConnect brings a QP from RESET (or INIT) to RTS as rdma_cm does.
func cmConnect(q *QP, rtr, rts QPAttr, respRes uint8) error {
	if q.State() == QPSReset {
		access := AccessRemoteWrite
		if respRes > 0 {
			access |= AccessRemoteRead | AccessRemoteAtomic
		}
		a := QPAttr{State: QPSInit, Port: 1, AccessFlags: access}
		if err := q.Modify(&a, QPAttrState|QPAttrPKeyIndex|QPAttrPort|QPAttrAccessFlags); err != nil {
			return fmt.Errorf("modify qp %d to INIT: %w", q.QPN(), err)
		}
	}
	rtr.State = QPSRTR
	mask := QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN
	if q.Type() == RC {
		mask |= QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer
	}
	if err := q.Modify(&rtr, mask); err != nil {
		return fmt.Errorf("modify qp %d to RTR: %w", q.QPN(), err)
	}
	rts.State = QPSRTS
	mask = QPAttrState | QPAttrSQPSN
	if q.Type() == RC {
		mask |= QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic
	}
	if err := q.Modify(&rts, mask); err != nil {
		return fmt.Errorf("modify qp %d to RTS: %w", q.QPN(), err)
	}
	return nil
}

// flowLabel is rdma_cm's flow label for a connection between two rdma_cm
// ports (cma.c: cma_get_roce_udp_flow_label), which rxe turns into the
// data packets' UDP source port.
func flowLabel(sport, dport uint16) uint32 {
	return (uint32(sport)*31 + uint32(dport)) & 0xFFFFF
}

// eventErr turns a failure event into an error.
func eventErr(e cm.Event) error {
	switch e.Kind {
	case cm.EventRejected:
		return &RejectError{Reason: e.Reason, PrivateData: e.PrivateData}
	case cm.EventUnreachable:
		return ErrUnreachable
	}
	return fmt.Errorf("rdma_cm: unexpected event %v", e.Kind)
}
