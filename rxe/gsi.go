package rxe

import (
	"net/netip"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe/link"
)

// The device's QP 1, the general services interface. Kernel rxe creates it
// with the device and the kernel's MAD layer runs on it; here it carries
// the connection manager's MADs (package cm) between the link and the
// device's cm.Manager. A MAD is a UD SEND ONLY from QP 1 to QP 1 with the
// GSI Q_Key; rxe drops QP 1 receives with any other Q_Key, and so does this.
// QP 1 sends from UDP source port gsiSrcPort, its PSNs count up from 0 (the
// kernel's IB_MAD_SEND_Q_PSN), hop limit 64.

// gsiSrcPort is kernel rxe's QP 1 source port, 0xC000 | (hash_32(1, 14) &
// 0x3FFF), which every kernel CM MAD in the captures carries.
const gsiSrcPort = 0xD872

// gsi is QP 1's state, under the device's mutex.
type gsi struct {
	cm  *cm.Manager
	psn uint32
	// due is the manager's next deadline, kept so that the runtime's
	// deadline hint does not scan the connections.
	due qp.Time
	// ready wakes a consumer when the manager has events (capacity 1).
	ready chan struct{}
	av    qp.AddressVector
	out   cm.Output // the MAD being sent
}

func (d *Device) initGSI(seed uint64) {
	d.gsi.cm = cm.New(cm.Config{GUID: d.attr.NodeGUID, Seed: seed, TargetACKDelay: rxeACKDelay})
	d.gsi.due = qp.Never
	d.gsi.ready = make(chan struct{}, 1)
}

// rxeACKDelay is kernel rxe's local CA ACK delay, the REP's target ACK delay.
const rxeACKDelay = 15

// CMReady receives a value when the connection manager has events for its
// consumer; the consumer then takes them with WithCM.
func (d *Device) CMReady() <-chan struct{} { return d.gsi.ready }

// WithCM runs fn with the device's connection manager, under the device's
// lock, at time now (the runtime's Now, or the simulator's time), then sends
// what fn caused. fn must not call the device.
func (d *Device) WithCM(now qp.Time, fn func(m *cm.Manager, now cm.Time)) {
	d.mu.Lock()
	fn(d.gsi.cm, cm.Time(now))
	d.gsiChanged()
	d.mu.Unlock()
	d.notify()
}

// gsiReceive hands a MAD to the connection manager after the checks rxe
// makes for QP 1. Called with mu held.
func (d *Device) gsiReceive(now qp.Time, fr *packet.Frame, p *packet.Packet, src netip.Addr, icrc icrcMode) {
	if p.BTH.Opcode != packet.UDSendOnly {
		d.cnt.GSIDropped++
		return
	}
	if p.BTH.PKey&0x7FFF != 0x7FFF {
		d.cnt.BadPKey++
		return
	}
	if p.DETH.QKey != packet.GSIQKey {
		d.cnt.BadQKey++
		return
	}
	if !d.icrcOK(fr, icrc) {
		return
	}
	// QP 1's packets count in rcvd_pkts and sent_pkts, as rxe's do.
	d.qpCnt.RcvdPkts++
	d.cnt.GSI++
	d.gsi.cm.Receive(cm.Time(now), src, p.Payload)
	d.gsiChanged()
}

// gsiChanged notes the manager's new deadline and wakes its consumer if
// events wait. Called with mu held.
func (d *Device) gsiChanged() {
	d.gsi.due = qp.Never
	if dl, ok := d.gsi.cm.Deadline(); ok {
		d.gsi.due = qp.Time(dl)
	}
	if d.gsi.cm.HasEvents() {
		select {
		case d.gsi.ready <- struct{}{}:
		default:
		}
	}
}

// gsiTick runs the manager's timers when due. Called with mu held.
func (d *Device) gsiTick(now qp.Time) {
	if d.gsi.due <= now {
		d.gsi.cm.Tick(cm.Time(now))
		d.gsiChanged()
	}
}

// outputGSI puts the manager's MADs into frames from n on. Called with mu
// held.
func (d *Device) outputGSI(now qp.Time, frames []link.Frame, n, looped int) (int, int) {
	for n < len(frames) && looped < loopBudget && d.gsi.cm.HasOutput() {
		d.gsi.out, _ = d.gsi.cm.Output()
		o := &d.gsi.out
		src := d.gsiSource(o.To)
		d.qpCnt.SentPkts++
		if src < 0 {
			d.cnt.TxNoRoute++
			continue
		}
		d.gsi.av = qp.AddressVector{DGID: o.To, SGIDIndex: uint8(src), HopLimit: defaultHopLimit}
		out := &d.txOut
		out.AV = &d.gsi.av
		out.Pkt = packet.Packet{
			BTH:     packet.BTHFields{Opcode: packet.UDSendOnly, PKey: 0xFFFF, DestQP: packet.GSIQPN, AckReq: true, PSN: d.gsi.psn},
			DETH:    packet.DETHFields{QKey: packet.GSIQKey, SrcQP: packet.GSIQPN},
			Payload: o.MAD[:],
		}
		d.gsi.psn = (d.gsi.psn + 1) & 0xFFFFFF
		switch d.emit(now, gsiSrcPort, &frames[n]) {
		case emitFrame:
			n++
		case emitLoopback:
			looped++
		}
		out.Pkt.Payload = nil
	}
	return n, looped
}

// gsiSource returns the index of the GID QP 1 sends to to from: the first
// RoCE v2 GID of the same family, -1 if there is none.
func (d *Device) gsiSource(to netip.Addr) int {
	to = to.Unmap()
	for i, ip := range d.gidIPs {
		if i > 0 && ip.Is4() == to.Is4() {
			return i
		}
	}
	return -1
}
