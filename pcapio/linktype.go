package pcapio

import (
	"encoding/binary"
	"errors"

	"github.com/gopacket/gopacket/layers"
	"github.com/softroce/softroce/packet"
)

// ErrLinkType is returned for records whose link type pcapio cannot strip
// down to an IP header.
var ErrLinkType = errors.New("pcapio: unsupported link type")

// Link-layer header lengths and the EtherTypes seen in front of an IP header.
const (
	sllLen          = 16 // Linux cooked capture v1
	sll2Len         = 20 // Linux cooked capture v2
	nullLen         = 4  // BSD loopback: address family in host order
	etherTypeVLAN   = 0x8100
	etherTypeQinQ   = 0x88A8
	maxVLANTagDepth = 2
)

// IP returns the record's IP packet (IP header onwards, possibly followed by
// link-layer padding) for the link types pcapio understands: Ethernet II
// with up to two VLAN tags, raw IP (LINKTYPE_RAW, _IPV4, _IPV6), Linux cooked
// SLL and SLL2, and BSD loopback. It returns packet.ErrNotIP when the link
// layer carries something other than IP, packet.ErrTruncated when the link
// header is cut short and ErrLinkType for other link types.
func (rec *Record) IP() ([]byte, error) {
	b := rec.Data
	switch rec.LinkType {
	case layers.LinkTypeEthernet:
		if len(b) < packet.EthernetLen {
			return nil, packet.ErrTruncated
		}
		off := 12
		et := binary.BigEndian.Uint16(b[off:])
		for i := 0; i < maxVLANTagDepth && (et == etherTypeVLAN || et == etherTypeQinQ); i++ {
			off += 4
			if len(b) < off+2 {
				return nil, packet.ErrTruncated
			}
			et = binary.BigEndian.Uint16(b[off:])
		}
		return ipAfterEtherType(et, b[off+2:])
	case layers.LinkTypeRaw, layers.LinkTypeIPv4, layers.LinkTypeIPv6:
		return b, nil
	case layers.LinkTypeLinuxSLL:
		if len(b) < sllLen {
			return nil, packet.ErrTruncated
		}
		return ipAfterEtherType(binary.BigEndian.Uint16(b[14:]), b[sllLen:])
	case layers.LinkTypeLinuxSLL2:
		if len(b) < sll2Len {
			return nil, packet.ErrTruncated
		}
		return ipAfterEtherType(binary.BigEndian.Uint16(b), b[sll2Len:])
	case layers.LinkTypeNull, layers.LinkTypeLoop:
		// The address family's value and byte order depend on the
		// capturing OS; the IP version nibble does not.
		if len(b) < nullLen+1 {
			return nil, packet.ErrTruncated
		}
		if v := b[nullLen] >> 4; v != 4 && v != 6 {
			return nil, packet.ErrNotIP
		}
		return b[nullLen:], nil
	}
	return nil, ErrLinkType
}

func ipAfterEtherType(et uint16, b []byte) ([]byte, error) {
	if et != packet.EtherTypeIPv4 && et != packet.EtherTypeIPv6 {
		return nil, packet.ErrNotIP
	}
	return b, nil
}

// Frame parses the record as a RoCE v2 frame into f. Ethernet records go
// through packet.ParseFrame (f.Eth is set); the others through
// packet.ParseIP after their link header is stripped (f.Eth is nil). Errors
// are packet's framing errors (packet.ErrNotRoCE and so on) or ErrLinkType;
// none of them allocates.
func (rec *Record) Frame(f *packet.Frame) error { return rec.frame(f, true) }

// FrameUnverified is Frame without the IPv4 header and UDP checksum checks
// (packet.ParseFrameUnverified): for captures taken on a sending host with
// checksum offload, whose checksums were not yet filled in.
func (rec *Record) FrameUnverified(f *packet.Frame) error { return rec.frame(f, false) }

func (rec *Record) frame(f *packet.Frame, verify bool) error {
	if rec.LinkType == layers.LinkTypeEthernet {
		// Direct calls, not function values, so that f does not escape.
		var err error
		if verify {
			err = packet.ParseFrame(rec.Data, f)
		} else {
			err = packet.ParseFrameUnverified(rec.Data, f)
		}
		if err != packet.ErrNotIP {
			return err
		}
		// packet.ParseFrame knows one 802.1Q tag; IP also strips QinQ.
	}
	ip, err := rec.IP()
	if err != nil {
		return err
	}
	if verify {
		err = packet.ParseIP(ip, f)
	} else {
		err = packet.ParseIPUnverified(ip, f)
	}
	if err != nil {
		return err
	}
	if rec.LinkType == layers.LinkTypeEthernet {
		f.Eth = rec.Data[:len(rec.Data)-len(ip)]
	}
	return nil
}
