package rxe

import (
	"errors"
	"net/netip"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe/link"
)

// QPNs with special meaning in the BTH.
const (
	gsiQPN       = 1
	multicastQPN = 0xFFFFFF
)

// HandleFrame processes one received Ethernet frame at time now: the checks
// of rxe's receive path, in rxe's order (rxe_rcv, hdr_check, then the ICRC),
// then delivery to the QP. Frames that
// fail a check are dropped and counted by cause. f.Data is only read, and not
// kept past the call.
func (d *Device) HandleFrame(now qp.Time, f link.Frame) {
	d.mu.Lock()
	d.handleLocked(now, f.Data, icrcModeOf(&f))
	d.mu.Unlock()
	d.notify()
}

// HandleFrames processes a batch of received frames under one lock.
func (d *Device) HandleFrames(now qp.Time, frames []link.Frame) {
	d.handleFrames(now, frames)
	d.notify()
}

// handleFrames is HandleFrames without the notification, for the runtime's
// receive goroutine, which sends what the frames caused itself.
func (d *Device) handleFrames(now qp.Time, frames []link.Frame) {
	d.mu.Lock()
	for i := range frames {
		d.handleLocked(now, frames[i].Data, icrcModeOf(&frames[i]))
	}
	d.mu.Unlock()
}

// handleLocked is the receive path. Called with mu held; does not allocate.
func (d *Device) handleLocked(now qp.Time, data []byte, icrc icrcMode) {
	fr := &d.rxFrame
	if err := packet.ParseFrame(data, fr); err != nil {
		if errors.Is(err, packet.ErrNotIP) || errors.Is(err, packet.ErrNotUDP) || errors.Is(err, packet.ErrNotRoCE) {
			d.cnt.NotRoCE++
		} else {
			d.cnt.Malformed++
		}
		return
	}
	src, dst := frameAddrs(fr)
	if !d.ownIP(dst) {
		d.cnt.BadDGID++
		return
	}
	in := &d.rxIn
	p := &in.Pkt
	if err := p.Decode(fr.Transport); err != nil {
		if err == packet.ErrUnknownOpcode {
			d.cnt.UnknownOpcode++
		} else {
			d.cnt.Malformed++
		}
		return
	}
	if p.BTH.Opcode.Transport() == packet.TransportCNP {
		d.receiveCNP(now, fr, p, src, dst, icrc)
		return
	}
	qpn := p.BTH.DestQP
	switch qpn {
	case 0:
		d.cnt.Malformed++
		return
	case gsiQPN:
		d.gsiReceive(now, fr, p, src, icrc)
		return
	case multicastQPN:
		d.cnt.Multicast++
		return
	}
	x := d.qps.get(qpn)
	if x == nil {
		d.cnt.UnknownQP++
		return
	}
	if st := x.q.State(); st == qp.Reset || st == qp.Init {
		d.cnt.QPNotReady++
		return
	}
	if x.init.Type != qp.UD && (src != x.remote || dst != x.local) {
		d.cnt.AddrMismatch++ // rxe check_addr
		return
	}
	// P_Key (rxe check_keys): the port's only entry is 0xFFFF, a full
	// member, so any P_Key whose low 15 bits are 0x7FFF matches (pkey_match).
	if p.BTH.PKey&0x7FFF != 0x7FFF {
		d.cnt.BadPKey++
		return
	}
	if x.init.Type == qp.UD && p.Info().Is(packet.HdrDETH) && p.DETH.QKey != x.qkey {
		d.cnt.BadQKey++
		return
	}
	if !d.icrcOK(fr, icrc) {
		return
	}
	in.Src, in.Dst = src, dst
	in.IPHeader = fr.IP
	x.q.Receive(now, in)
	in.Pkt.Payload = nil
	in.IPHeader = nil
	d.markReady(x)
	d.noteDeadline(x)
}

// frameAddrs returns a parsed frame's source and destination IPs (IPv4 as
// plain IPv4), without allocating.
func frameAddrs(f *packet.Frame) (src, dst netip.Addr) {
	ip := f.IP
	if f.IsIPv4() {
		return netip.AddrFrom4([4]byte(ip[12:16])), netip.AddrFrom4([4]byte(ip[16:20]))
	}
	return netip.AddrFrom16([16]byte(ip[8:24])).Unmap(), netip.AddrFrom16([16]byte(ip[24:40])).Unmap()
}

// icrcMode is how the receive path treats a frame's ICRC.
type icrcMode uint8

const (
	icrcCheck     icrcMode = iota // check it
	icrcIDUnknown                 // check it, solving for the IPv4 ID (link.Frame.IPIDUnknown)
	icrcChecked                   // the link checked it (link.Frame.ICRCChecked)
)

func icrcModeOf(f *link.Frame) icrcMode {
	switch {
	case f.ICRCChecked:
		return icrcChecked
	case f.IPIDUnknown:
		return icrcIDUnknown
	}
	return icrcCheck
}

// icrcOK checks the ICRC (unless the link did) and counts a failure. When the link could not see
// the IPv4 identification and DF bit the sender used (a UDP socket), the
// check solves for them (packet.RecoverIPv4ID): 15 of the 32 bits are then
// verified, the packet is counted in ICRCIDUnknown, and the recovered bits
// are put back into a copy of the IPv4 header (d.rxIPHdr), which is what a UD
// receive shows in its GRH area.
func (d *Device) icrcOK(fr *packet.Frame, icrc icrcMode) bool {
	if icrc == icrcChecked {
		return true
	}
	if icrc == icrcIDUnknown && fr.IsIPv4() {
		id, df, ok := packet.RecoverIPv4ID(fr)
		if !ok {
			d.cnt.BadICRC++
			return false
		}
		d.cnt.ICRCIDUnknown++
		h := d.rxIPHdr[:]
		copy(h, fr.IP)
		packet.SetIPv4ID(h, id, df)
		fr.IP = h
		return true
	}
	if !fr.ICRCOK() {
		d.cnt.BadICRC++
		return false
	}
	return true
}

// receiveCNP takes a congestion notification (BTH opcode 0x81) through the
// checks any packet to a connected QP passes (a known QP, its peer's and
// its own address, the ICRC) and hands it to the QP's reaction point.
// rx_cnp counts every CNP that arrives; rp_cnp_handled and rp_cnp_ignored
// those that reached a QP; the difference failed a check. (No other drop
// counter sees a CNP, so each received frame is counted once.) Kernel rxe
// drops every CNP; so does this device unless its reaction point is on.
func (d *Device) receiveCNP(now qp.Time, fr *packet.Frame, p *packet.Packet, src, dst netip.Addr, icrc icrcMode) {
	d.cnt.CNP++
	qpn := p.BTH.DestQP
	if qpn <= gsiQPN || qpn == multicastQPN {
		return
	}
	x := d.qps.get(qpn)
	if x == nil || x.init.Type == qp.UD || src != x.remote || dst != x.local {
		return
	}
	ok := icrc == icrcChecked || fr.ICRCOK()
	if !ok && icrc == icrcIDUnknown && fr.IsIPv4() {
		_, _, ok = packet.RecoverIPv4ID(fr)
	}
	if !ok {
		return
	}
	x.q.ReceiveCNP(now)
	d.markReady(x)
	d.noteDeadline(x)
}
