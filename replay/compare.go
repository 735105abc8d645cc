package replay

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/softroce/softroce/packet"
)

// Describe formats a packet's transport headers in one line, in the style
// of softroce decode.
func Describe(p *packet.Packet) string {
	var b strings.Builder
	info := p.Info()
	fmt.Fprintf(&b, "%s qpn=%#06x psn=%d", p.BTH.Opcode, p.BTH.DestQP, p.BTH.PSN)
	if p.BTH.AckReq {
		b.WriteString(" ackreq=1")
	}
	if p.BTH.SE {
		b.WriteString(" se=1")
	}
	if info.Is(packet.HdrRETH) {
		fmt.Fprintf(&b, " va=%#x rkey=%#x dlen=%d", p.RETH.VA, p.RETH.RKey, p.RETH.Length)
	}
	if info.Is(packet.HdrAETH) {
		fmt.Fprintf(&b, " syndrome=%q msn=%d", p.AETH.Syndrome.String(), p.AETH.MSN)
	}
	if info.Is(packet.HdrAtomicETH) {
		fmt.Fprintf(&b, " va=%#x rkey=%#x swapadd=%#x compare=%#x", p.AtomicETH.VA, p.AtomicETH.RKey, p.AtomicETH.SwapAdd, p.AtomicETH.Compare)
	}
	if info.Is(packet.HdrAtomicAckETH) {
		fmt.Fprintf(&b, " orig=%#x", p.AtomicAck)
	}
	if info.Is(packet.HdrImmDt) {
		fmt.Fprintf(&b, " imm=%#08x", p.Imm)
	}
	if info.Is(packet.HdrIETH) {
		fmt.Fprintf(&b, " inv_rkey=%#x", p.IETH)
	}
	if info.Is(packet.HdrDETH) {
		fmt.Fprintf(&b, " qkey=%#x srcqp=%#06x", p.DETH.QKey, p.DETH.SrcQP)
	}
	fmt.Fprintf(&b, " len=%d", len(p.Payload))
	return b.String()
}

// compareFields lists how ours differs from the captured packet in the
// fields a replay checks by default.
func compareFields(ours, theirs *packet.Packet) []string {
	var d []string
	add := func(name string, o, t any) {
		if o != t {
			d = append(d, fmt.Sprintf("%s: captured %v, softroce %v", name, t, o))
		}
	}
	add("opcode", ours.BTH.Opcode, theirs.BTH.Opcode)
	if ours.BTH.Opcode != theirs.BTH.Opcode {
		return d // the other headers are not comparable
	}
	add("dest QP", ours.BTH.DestQP, theirs.BTH.DestQP)
	add("PSN", ours.BTH.PSN, theirs.BTH.PSN)
	add("AckReq", ours.BTH.AckReq, theirs.BTH.AckReq)
	add("SE", ours.BTH.SE, theirs.BTH.SE)
	info := theirs.Info()
	if info.Is(packet.HdrAETH) {
		add("AETH syndrome", ours.AETH.Syndrome.String(), theirs.AETH.Syndrome.String())
		add("MSN", ours.AETH.MSN, theirs.AETH.MSN)
	}
	if info.Is(packet.HdrRETH) {
		add("RETH", ours.RETH, theirs.RETH)
	}
	if info.Is(packet.HdrAtomicETH) {
		add("AtomicETH", ours.AtomicETH, theirs.AtomicETH)
	}
	if info.Is(packet.HdrAtomicAckETH) {
		add("atomic original value", fmt.Sprintf("%#x", ours.AtomicAck), fmt.Sprintf("%#x", theirs.AtomicAck))
	}
	if info.Is(packet.HdrImmDt) {
		add("immediate data", ours.Imm, theirs.Imm)
	}
	if info.Is(packet.HdrIETH) {
		add("IETH", ours.IETH, theirs.IETH)
	}
	if info.Is(packet.HdrDETH) {
		add("DETH", ours.DETH, theirs.DETH)
	}
	if !bytes.Equal(ours.Payload, theirs.Payload) {
		d = append(d, "payload: "+firstByteDiff(theirs.Payload, ours.Payload))
	}
	return d
}

// compareBytes lists how our frame differs from the captured one byte for
// byte from the IP header on, apart from the IPv4 ID and the IP checksum
// and ICRC that cover it. Our ICRC must be right.
func compareBytes(ours, theirs []byte) []string {
	var fo, ft packet.Frame
	if err := packet.ParseFrame(ours, &fo); err != nil {
		return []string{fmt.Sprintf("softroce's frame does not parse: %v", err)}
	}
	if err := packet.ParseFrame(theirs, &ft); err != nil {
		return []string{fmt.Sprintf("captured frame does not parse: %v", err)}
	}
	var d []string
	if !fo.ICRCOK() {
		d = append(d, "softroce's ICRC is wrong")
	}
	io, it := append([]byte(nil), fo.IP...), append([]byte(nil), ft.IP...)
	if fo.IsIPv4() && ft.IsIPv4() {
		for _, b := range [][]byte{io, it} {
			b[4], b[5], b[10], b[11] = 0, 0, 0, 0
		}
	}
	if !bytes.Equal(io, it) {
		d = append(d, "IP header: "+firstByteDiff(it, io))
	}
	if !bytes.Equal(fo.UDP, ft.UDP) {
		d = append(d, "UDP header: "+firstByteDiff(ft.UDP, fo.UDP))
	}
	to, tt := fo.Transport, ft.Transport
	to, tt = to[:max(0, len(to)-packet.ICRCLen)], tt[:max(0, len(tt)-packet.ICRCLen)]
	if !bytes.Equal(to, tt) {
		d = append(d, "transport: "+firstByteDiff(tt, to))
	}
	return d
}

// firstByteDiff says where two byte strings first differ.
func firstByteDiff(theirs, ours []byte) string {
	if len(theirs) != len(ours) {
		return fmt.Sprintf("captured %d bytes, softroce %d", len(theirs), len(ours))
	}
	for i := range theirs {
		if theirs[i] != ours[i] {
			return fmt.Sprintf("byte %d: captured %#02x, softroce %#02x", i, theirs[i], ours[i])
		}
	}
	return "equal"
}
