package packet

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// UDPPort is the IANA port of RoCE v2.
const UDPPort = 4791

// Framing sizes.
const (
	EthernetLen = 14
	IPv4Len     = 20
	IPv6Len     = 40
	UDPLen      = 8
	// EtherTypeIPv4 and EtherTypeIPv6 are the Ethernet II types softroce sends.
	EtherTypeIPv4 = 0x0800
	EtherTypeIPv6 = 0x86DD
	etherTypeVLAN = 0x8100
)

// Framing errors.
var (
	ErrNotIP       = errors.New("roce: not an IPv4 or IPv6 frame")
	ErrIPOptions   = errors.New("roce: IPv4 header has options")
	ErrNotUDP      = errors.New("roce: not UDP")
	ErrNotRoCE     = errors.New("roce: UDP destination port is not 4791")
	ErrFragmented  = errors.New("roce: IP fragment")
	ErrBadLength   = errors.New("roce: IP or UDP length does not match the frame")
	ErrIPChecksum  = errors.New("roce: bad IPv4 header checksum")
	ErrUDPChecksum = errors.New("roce: bad UDP checksum")
)

// Addressing is the IP and UDP framing of a RoCE v2 packet. Src and Dst are
// both IPv4 (plain or IPv4-mapped IPv6, as RoCE GIDs carry them) or both IPv6.
type Addressing struct {
	Src, Dst     netip.Addr
	SrcPort      uint16
	DstPort      uint16 // 0 means UDPPort
	TrafficClass uint8  // IPv4 TOS byte or IPv6 traffic class
	HopLimit     uint8  // IPv4 TTL or IPv6 hop limit
	FlowLabel    uint32 // IPv6 only
	IPID         uint16 // IPv4 only
	DF           bool   // IPv4 only: don't fragment
}

// IsIPv4 reports whether the addressing gives an IPv4 packet.
func (a *Addressing) IsIPv4() bool { return a.Src.Unmap().Is4() }

// HeaderLen returns the length of the IP and UDP headers.
func (a *Addressing) HeaderLen() int {
	if a.IsIPv4() {
		return IPv4Len + UDPLen
	}
	return IPv6Len + UDPLen
}

// AppendIPUDP appends an IP header and a UDP header (checksum 0, as rxe sends)
// for a UDP payload of payloadLen bytes.
func (a *Addressing) AppendIPUDP(dst []byte, payloadLen int) []byte {
	start := len(dst)
	dst = grow(dst, a.HeaderLen())
	b := dst[start:]
	udpLen := UDPLen + payloadLen
	var u []byte
	if a.IsIPv4() {
		ip := b[:IPv4Len]
		ip[0] = 0x45
		ip[1] = a.TrafficClass
		binary.BigEndian.PutUint16(ip[2:], uint16(IPv4Len+udpLen))
		binary.BigEndian.PutUint16(ip[4:], a.IPID)
		ip[6], ip[7] = 0, 0
		if a.DF {
			ip[6] = 0x40
		}
		ip[8] = a.HopLimit
		ip[9] = 17
		ip[10], ip[11] = 0, 0
		s, d := as4(a.Src), as4(a.Dst)
		copy(ip[12:16], s[:])
		copy(ip[16:20], d[:])
		binary.BigEndian.PutUint16(ip[10:], IPv4HeaderChecksum(ip))
		u = b[IPv4Len:]
	} else {
		ip := b[:IPv6Len]
		binary.BigEndian.PutUint32(ip, 6<<28|uint32(a.TrafficClass)<<20|a.FlowLabel&0xFFFFF)
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6] = 17
		ip[7] = a.HopLimit
		s, d := a.Src.As16(), a.Dst.As16()
		copy(ip[8:24], s[:])
		copy(ip[24:40], d[:])
		u = b[IPv6Len:]
	}
	dport := a.DstPort
	if dport == 0 {
		dport = UDPPort
	}
	binary.BigEndian.PutUint16(u, a.SrcPort)
	binary.BigEndian.PutUint16(u[2:], dport)
	binary.BigEndian.PutUint16(u[4:], uint16(udpLen))
	u[6], u[7] = 0, 0
	return dst
}

// as4 returns the IPv4 form of a, or 0.0.0.0 when a is not IPv4 (a
// mismatched Addressing must not panic).
func as4(a netip.Addr) [4]byte {
	if a = a.Unmap(); a.Is4() {
		return a.As4()
	}
	return [4]byte{}
}

// Ethernet holds the addresses of an Ethernet II header.
type Ethernet struct {
	Dst, Src [6]byte
}

// AppendFrame appends a whole Ethernet frame: Ethernet II, IP, UDP, the
// transport packet and its ICRC.
func AppendFrame(dst []byte, eth *Ethernet, a *Addressing, p *Packet) []byte {
	start := len(dst)
	dst = grow(dst, EthernetLen)
	e := dst[start:]
	copy(e[0:6], eth.Dst[:])
	copy(e[6:12], eth.Src[:])
	et := uint16(EtherTypeIPv6)
	if a.IsIPv4() {
		et = EtherTypeIPv4
	}
	binary.BigEndian.PutUint16(e[12:], et)
	return AppendIPPacket(dst, a, p)
}

// AppendIPPacket appends an IP packet: IP, UDP, the transport packet and its ICRC.
func AppendIPPacket(dst []byte, a *Addressing, p *Packet) []byte {
	ipStart := len(dst)
	dst = a.AppendIPUDP(dst, p.Len())
	tStart := len(dst)
	dst = p.AppendTo(dst)
	SetICRC(dst[ipStart:tStart], dst[tStart:])
	return dst
}

// AppendUDPPayload appends the transport packet with an ICRC computed over
// the IP and UDP headers that the kernel will write when a socket sends it:
// a's fields must be what the kernel uses (for IPv4 with path-MTU discovery
// on: DF set and IP ID 0).
func AppendUDPPayload(dst []byte, a *Addressing, p *Packet) []byte {
	var hdr [IPv6Len + UDPLen]byte
	h := a.AppendIPUDP(hdr[:0], p.Len())
	start := len(dst)
	dst = p.AppendTo(dst)
	SetICRC(h, dst[start:])
	return dst
}

// Frame is a parsed RoCE v2 frame: views into the buffer it was parsed from.
// Eth is nil when parsing started at the IP header.
type Frame struct {
	Eth       []byte
	IP        []byte
	UDP       []byte
	Transport []byte // BTH through ICRC
}

// IPUDP returns the IP and UDP headers as one slice, as the ICRC covers them.
func (f *Frame) IPUDP() []byte { return f.IP[:len(f.IP)+len(f.UDP)] }

// ICRCOK reports whether the frame's ICRC is right.
func (f *Frame) ICRCOK() bool { return CheckICRC(f.IPUDP(), f.Transport) }

// IsIPv4 reports whether the frame is IPv4.
func (f *Frame) IsIPv4() bool { return len(f.IP) == IPv4Len }

// Addressing returns the frame's IP and UDP fields.
func (f *Frame) Addressing() Addressing {
	var a Addressing
	ip := f.IP
	if f.IsIPv4() {
		a.Src = netip.AddrFrom4([4]byte(ip[12:16]))
		a.Dst = netip.AddrFrom4([4]byte(ip[16:20]))
		a.TrafficClass = ip[1]
		a.HopLimit = ip[8]
		a.IPID = binary.BigEndian.Uint16(ip[4:])
		a.DF = ip[6]&0x40 != 0
	} else {
		v := binary.BigEndian.Uint32(ip)
		a.TrafficClass = uint8(v >> 20)
		a.FlowLabel = v & 0xFFFFF
		a.HopLimit = ip[7]
		a.Src = netip.AddrFrom16([16]byte(ip[8:24]))
		a.Dst = netip.AddrFrom16([16]byte(ip[24:40]))
	}
	a.SrcPort = binary.BigEndian.Uint16(f.UDP)
	a.DstPort = binary.BigEndian.Uint16(f.UDP[2:])
	return a
}

// ParseFrame parses an Ethernet II frame (optionally with one 802.1Q tag)
// carrying RoCE v2. Trailing Ethernet padding is ignored.
func ParseFrame(b []byte, f *Frame) error { return parseFrame(b, f, true) }

// parseFrame is ParseFrame; verify says whether to check the IPv4 header and
// UDP checksums.
func parseFrame(b []byte, f *Frame, verify bool) error {
	if len(b) < EthernetLen {
		return ErrTruncated
	}
	off := 12
	et := binary.BigEndian.Uint16(b[off:])
	if et == etherTypeVLAN {
		if len(b) < EthernetLen+4 {
			return ErrTruncated
		}
		off += 4
		et = binary.BigEndian.Uint16(b[off:])
	}
	if et != EtherTypeIPv4 && et != EtherTypeIPv6 {
		return ErrNotIP
	}
	if err := parseIP(b[off+2:], f, verify); err != nil {
		return err
	}
	f.Eth = b[:off+2]
	return nil
}

// ParseIP parses an IP packet carrying RoCE v2, starting at its IP header.
// Bytes past the IP total length are ignored. It drops what the Linux IP and
// UDP layers would drop before rxe sees it: a bad IPv4 header checksum, a
// non-zero UDP checksum that does not verify, fragments, inconsistent
// lengths. It does not check the ICRC (see Frame.ICRCOK).
func ParseIP(b []byte, f *Frame) error { return parseIP(b, f, true) }

func parseIP(b []byte, f *Frame, verify bool) error {
	if len(b) < 1 {
		return ErrTruncated
	}
	var ipLen, total int
	switch b[0] >> 4 {
	case 4:
		if len(b) < IPv4Len {
			return ErrTruncated
		}
		if b[0]&0x0F != 5 {
			return ErrIPOptions
		}
		if b[9] != 17 {
			return ErrNotUDP
		}
		if binary.BigEndian.Uint16(b[6:])&0x3FFF != 0 {
			return ErrFragmented
		}
		ipLen, total = IPv4Len, int(binary.BigEndian.Uint16(b[2:]))
	case 6:
		if len(b) < IPv6Len {
			return ErrTruncated
		}
		if b[6] != 17 {
			return ErrNotUDP
		}
		ipLen, total = IPv6Len, IPv6Len+int(binary.BigEndian.Uint16(b[4:]))
	default:
		return ErrNotIP
	}
	if total > len(b) || total < ipLen+UDPLen {
		return ErrBadLength
	}
	b = b[:total]
	u := b[ipLen : ipLen+UDPLen]
	if binary.BigEndian.Uint16(u[2:]) != UDPPort {
		return ErrNotRoCE
	}
	if int(binary.BigEndian.Uint16(u[4:])) != total-ipLen {
		return ErrBadLength
	}
	if verify && ipLen == IPv4Len && !ipv4HeaderOK(b[:IPv4Len]) {
		return ErrIPChecksum
	}
	if verify && !udpChecksumOK(b[:ipLen], b[ipLen:]) {
		return ErrUDPChecksum
	}
	f.Eth = nil
	f.IP = b[:ipLen]
	f.UDP = u
	f.Transport = b[ipLen+UDPLen:]
	return nil
}
