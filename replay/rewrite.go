package replay

import (
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/packet"
)

// Rewrite says how to readdress a captured frame for another network.
type Rewrite struct {
	// Src and Dst replace the IP addresses; both IPv4 or both IPv6, of
	// either family whatever the capture's.
	Src, Dst netip.Addr
	// SrcPort, when not 0, replaces the UDP source port: a link that sends
	// through a kernel UDP socket sends from its own port.
	SrcPort uint16
	// SrcMAC and DstMAC are the Ethernet addresses.
	SrcMAC, DstMAC [6]byte
	// ZeroIPID writes IPv4 ID 0 with DF set, which is what the kernel
	// writes for a UDP socket with path-MTU discovery on; otherwise the
	// captured ID and DF bit stay.
	ZeroIPID bool
}

// Apply appends to dst the frame f would be with rw's addresses: the same
// transport packet (BTH through payload), TTL or hop limit and traffic
// class, in new Ethernet, IP and UDP headers, with the ICRC recomputed for
// them.
func (rw *Rewrite) Apply(dst []byte, f *Frame) ([]byte, error) {
	if rw.Src.Is4() != rw.Dst.Is4() || !rw.Src.IsValid() || !rw.Dst.IsValid() {
		return dst, fmt.Errorf("rewrite frame %d: source %s and destination %s are not of one IP family", f.No, rw.Src, rw.Dst)
	}
	var pf packet.Frame
	if err := packet.ParseFrame(f.Data, &pf); err != nil {
		return dst, fmt.Errorf("rewrite frame %d: %w", f.No, err)
	}
	a := pf.Addressing()
	a.Src, a.Dst = rw.Src, rw.Dst
	if rw.SrcPort != 0 {
		a.SrcPort = rw.SrcPort
	}
	if !rw.Src.Is4() {
		a.IPID, a.DF = 0, false
	} else if rw.ZeroIPID || !pf.IsIPv4() {
		a.IPID, a.DF = 0, true
	}
	if rw.Src.Is4() {
		a.FlowLabel = 0
	}
	return packet.AppendFrame(dst, &packet.Ethernet{Dst: rw.DstMAC, Src: rw.SrcMAC}, &a, &f.Pkt), nil
}
