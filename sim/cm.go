package sim

// cm.go: workloads whose QPs the connection manager connects ("connect":
// "cm"). The simulation plays rdma_cm's part: the responder's host listens
// on a service ID of the flow's own, the requester's host sends the REQ
// (the QP numbers, PSNs, MTU and resources the direct connection would
// use), each side moves its QP to RTS from the other's message, as the
// kernel's rdma_cm does, and the flow's operations begin once the RTU is
// sent. The MADs cross the simulated network with its faults; the
// manager's retransmissions run on the devices' timers in virtual time.

import (
	"fmt"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
)

// flowCM is a flow's connection-manager state.
type flowCM struct {
	sid        uint64 // the listener's service ID
	psnA, psnB uint32 // the first PSN each side sends
	conn       cm.ConnID
}

// cmPortBase is the first rdma_cm port the flows listen on: flow i uses
// cmPortBase+i.
const cmPortBase = 20000

// cmSetup listens for the flow at its responder, moves the responder's QP
// to INIT (its receives are posted next), and sends the REQ.
func (f *flow) cmSetup(psnA, psnB uint32) error {
	if cmPortBase+f.id > 0xFFFF {
		return fmt.Errorf("flow %s: more flows than rdma_cm ports", f.name)
	}
	f.cm = flowCM{sid: packet.ServiceID(packet.PortSpaceTCP, uint16(cmPortBase+f.id)), psnA: psnA, psnB: psnB}
	init := qp.Attr{State: qp.Init, Port: 1, AccessFlags: qp.AccessRemoteWrite | qp.AccessRemoteRead | qp.AccessRemoteAtomic}
	if err := f.qb.Modify(&init, qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags); err != nil {
		return fmt.Errorf("flow %s: qp %d to INIT: %w", f.name, f.qb.QPN(), err)
	}
	var err error
	f.b.dev.d.WithCM(0, func(m *cm.Manager, _ cm.Time) { _, err = m.Listen(f.cm.sid) })
	if err != nil {
		return fmt.Errorf("flow %s: listen: %w", f.name, err)
	}
	f.b.cmListen[f.cm.sid] = f
	w := f.wl
	rr := intAttr(w.MaxRdAtomic, 16)
	req := packet.CMReq{
		ServiceID: f.cm.sid, LocalQPN: f.qa.QPN(), ResponderResources: rr, InitiatorDepth: rr,
		RemoteCMResponseTimeout: cm.ResponseTimeout, StartingPSN: psnB, LocalCMResponseTimeout: cm.ResponseTimeout,
		RetryCount: intAttr(w.RetryCnt, 7), PKey: 0xFFFF, PathMTU: uint8(f.mtu.Enum()),
		RNRRetryCount: intAttr(w.RNRRetry, 7), MaxCMRetries: cm.MaxCMRetries,
		Primary: packet.CMPath{LocalLID: 0xFFFF, RemoteLID: 0xFFFF, LocalGID: f.a.info.IP.As16(),
			RemoteGID: f.b.info.IP.As16(), HopLimit: 64, TrafficClass: f.trafficClass(), LocalACKTimeout: intAttr(w.Timeout, 14)},
	}
	if f.typ == qp.UC {
		req.TransportType = packet.CMTransportUC
	}
	f.a.dev.d.WithCM(0, func(m *cm.Manager, now cm.Time) { f.cm.conn, err = m.Connect(now, f.b.info.IP, &req) })
	if err != nil {
		return fmt.Errorf("flow %s: connect: %w", f.name, err)
	}
	f.a.cmConns[f.cm.conn] = f
	return nil
}

// pollCM takes every host's connection-manager events and answers them.
func (run *runState) pollCM() {
	if !run.cmFlows {
		return
	}
	for _, hr := range run.hosts {
		select {
		case <-hr.dev.d.CMReady():
		default:
			continue
		}
		var evs []cm.Event
		hr.dev.d.WithCM(qp.Time(run.w.loop.Now()), func(m *cm.Manager, _ cm.Time) {
			for e, ok := m.Event(); ok; e, ok = m.Event() {
				evs = append(evs, e)
			}
		})
		for _, e := range evs {
			run.cmEvent(hr, e)
		}
	}
}

// cmEvent answers one event at host hr.
func (run *runState) cmEvent(hr *hostRT, e cm.Event) {
	now := qp.Time(run.w.loop.Now())
	switch e.Kind {
	case cm.EventReq:
		f := hr.cmListen[e.Req.ServiceID]
		if f == nil {
			return
		}
		run.w.rec.event("cm", f.name, "REQ", fmt.Sprintf("qpn=%d psn=%d", e.Req.LocalQPN, e.Req.StartingPSN))
		if err := f.connect(f.qb, f.b, f.a, e.Req.LocalQPN, e.Req.StartingPSN, f.cm.psnA); err != nil {
			run.fail(err)
			return
		}
		rep := packet.CMRep{LocalQPN: f.qb.QPN(), StartingPSN: f.cm.psnA, ResponderResources: e.Req.InitiatorDepth,
			InitiatorDepth: e.Req.ResponderResources, TargetACKDelay: 15, RNRRetryCount: e.Req.RNRRetryCount}
		var err error
		hr.dev.d.WithCM(now, func(m *cm.Manager, now cm.Time) { err = m.Accept(now, e.Conn, &rep) })
		if err != nil {
			run.fail(fmt.Errorf("flow %s: accept: %w", f.name, err))
		}
	case cm.EventRep:
		f := hr.cmConns[e.Conn]
		if f == nil {
			return
		}
		run.w.rec.event("cm", f.name, "REP", fmt.Sprintf("qpn=%d psn=%d", e.Rep.LocalQPN, e.Rep.StartingPSN))
		if err := f.connect(f.qa, f.a, f.b, e.Rep.LocalQPN, f.cm.psnA, f.cm.psnB); err != nil {
			run.fail(err)
			return
		}
		var err error
		hr.dev.d.WithCM(now, func(m *cm.Manager, now cm.Time) { err = m.Ready(now, e.Conn, nil) })
		if err != nil {
			run.fail(fmt.Errorf("flow %s: RTU: %w", f.name, err))
			return
		}
		f.connected = true
		if f.started {
			f.begin(run)
		}
	case cm.EventRejected, cm.EventUnreachable:
		if f := hr.cmConns[e.Conn]; f != nil {
			run.fail(fmt.Errorf("flow %s: the connection manager could not connect: %v (reason %d)", f.name, e.Kind, e.Reason))
		}
	}
}
