package dropin

// cm_qp.go: the QP attributes a connection implies, rdma_init_qp_attr's
// answer (the kernel's cm_init_qp_*_attr and cma_init_*_qp, as
// reference/rdma-cm.md §1.6 records them).

import (
	"syscall"

	"github.com/softroce/softroce/verbsapi"
)

// libibverbs QP states.
const (
	ibvQPSInit = 1
	ibvQPSRTR  = 2
	ibvQPSRTS  = 3
)

func (c *conn) cmInitQPAttr(b []byte) syscall.Errno {
	var a wireCMInitQPAttr
	id := cmArg(c, b, &a)
	if id == nil {
		return syscall.EINVAL
	}
	var out wireModifyQP
	at := &out.Attr
	at.QPState = a.QPState
	var mask verbsapi.QPAttrMask
	ud := id.qpType == qpTypeUD
	switch a.QPState {
	case ibvQPSInit:
		at.PortNum = 1
		mask = verbsapi.QPAttrState | verbsapi.QPAttrPKeyIndex | verbsapi.QPAttrPort
		if ud {
			at.QKey = udpQKey
			mask |= verbsapi.QPAttrQKey
			break
		}
		// Before the exchange a connected QP gets no remote access
		// (cma_init_conn_qp); after it, write, and read and atomics when
		// it serves any (cm_init_qp_init_attr).
		if resp, known := id.ourRespRes(); known {
			at.QPAccessFlags = uint32(verbsapi.AccessRemoteWrite)
			if resp > 0 {
				at.QPAccessFlags |= uint32(verbsapi.AccessRemoteRead | verbsapi.AccessRemoteAtomic)
			}
		}
		mask |= verbsapi.QPAttrAccessFlags
	case ibvQPSRTR:
		mask = verbsapi.QPAttrState
		if ud {
			break
		}
		switch id.state {
		case idResponded, idConnected:
			if id.rep.LocalQPN == 0 && id.req.ServiceID == 0 {
				return syscall.EINVAL
			}
		case idRequest, idAccepted:
		default:
			return c.refuse(syscall.EINVAL, "init_qp_attr RTR: id %d has no connection yet", id.handle)
		}
		r := &id.req
		at.PathMTU = uint32(r.PathMTU)
		if port, err := c.ctx.QueryPort(1); err == nil && uint32(port.ActiveMTU.Enum()) < at.PathMTU {
			at.PathMTU = uint32(port.ActiveMTU.Enum())
		}
		at.RQPSN = id.psn
		at.MinRNRTimer = 0 // 655.36 ms, as rdma_cm's QPs
		if id.passive() {
			at.DestQPNum, at.MaxDestRdAtomic = r.LocalQPN, r.InitiatorDepth
		} else {
			at.DestQPNum, at.MaxDestRdAtomic = id.rep.LocalQPN, id.rep.InitiatorDepth
		}
		at.AHAttr = c.ahTo(id)
		if id.passive() {
			at.AHAttr.FlowLabel = r.Primary.FlowLabel
		}
		mask |= verbsapi.QPAttrAV | verbsapi.QPAttrPathMTU | verbsapi.QPAttrDestQPN | verbsapi.QPAttrRQPSN |
			verbsapi.QPAttrMaxDestRdAtomic | verbsapi.QPAttrMinRNRTimer
	case ibvQPSRTS:
		mask = verbsapi.QPAttrState | verbsapi.QPAttrSQPSN
		if ud {
			at.SQPSN = 0
			break
		}
		r := &id.req
		at.Timeout = id.ackTimeout
		if id.passive() {
			at.SQPSN, at.RetryCnt, at.RNRRetry, at.MaxRdAtomic = r.StartingPSN, r.RetryCount, r.RNRRetryCount, r.ResponderResources
		} else {
			if id.state != idResponded && id.state != idConnected {
				return c.refuse(syscall.EINVAL, "init_qp_attr RTS: id %d has no REP yet", id.handle)
			}
			at.SQPSN, at.RetryCnt, at.RNRRetry, at.MaxRdAtomic = id.rep.StartingPSN, id.retry, id.rep.RNRRetryCount, id.rep.ResponderResources
		}
		mask |= verbsapi.QPAttrTimeout | verbsapi.QPAttrRetryCnt | verbsapi.QPAttrRNRRetry | verbsapi.QPAttrMaxQPRdAtomic
	default:
		return c.refuse(syscall.EINVAL, "init_qp_attr: state %d", a.QPState)
	}
	out.Handle, out.Mask = srNone, uint32(mask)
	c.w.put(out)
	return 0
}

// passive reports whether id is a request's child.
func (id *cmID) passive() bool { return id.child }

// ourRespRes returns the responder resources this side serves, once known.
func (id *cmID) ourRespRes() (uint8, bool) {
	switch {
	case id.passive():
		return id.req.InitiatorDepth, true
	case id.state >= idConnect && id.state != idRequest:
		return id.respRes, true
	}
	return 0, false
}
