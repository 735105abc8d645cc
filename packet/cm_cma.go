package packet

import (
	"errors"
	"fmt"
	"net/netip"
)

// The rdma_cm header (the kernel's struct cma_hdr, librdmacm's
// ib_connect_hdr): the first 36 bytes of the private data of a REQ or a
// SIDR_REQ whose service ID is in an IP port space. It carries the IP
// addresses and source port the connection was made with; the destination
// port is the service ID's low 16 bits.

// CMAHeaderLen is the size of the rdma_cm header.
const CMAHeaderLen = 36

// Port spaces of rdma_cm (enum rdma_port_space): a service ID is
// ps<<16 | port.
const (
	PortSpaceIPoIB = 0x0002
	PortSpaceTCP   = 0x0106
	PortSpaceUDP   = 0x0111
	PortSpaceIB    = 0x013F
)

// ServiceID returns the service ID of port in port space ps.
func ServiceID(ps, port uint16) uint64 { return uint64(ps)<<16 | uint64(port) }

// IPServiceID reports whether a service ID is one of rdma_cm's IP port
// spaces (IBTA annex A11), and if so its port space and port.
func IPServiceID(sid uint64) (ps, port uint16, ok bool) {
	if sid&0xFFFFFFFFFF000000 != 0x0000000001000000 {
		return 0, 0, false
	}
	return uint16(sid >> 16), uint16(sid), true
}

// ErrCMAHeader is a private-data header this stack cannot read.
var ErrCMAHeader = errors.New("cma header")

// CMAHeader is the decoded rdma_cm header.
type CMAHeader struct {
	Version  uint8 // cma_version: 0
	SrcPort  uint16
	Src, Dst netip.Addr // both IPv4 or both IPv6
}

// Decode reads the header from private data b. It fails on a short
// buffer, a version other than 0 or an IP version other than 4 or 6: the
// kernel's listener matches no such request.
func (h *CMAHeader) Decode(b []byte) error {
	if len(b) < CMAHeaderLen {
		return fmt.Errorf("%w: %d bytes", ErrCMAHeader, len(b))
	}
	if b[0] != 0 {
		return fmt.Errorf("%w: version %d", ErrCMAHeader, b[0])
	}
	h.Version, h.SrcPort = b[0], be.Uint16(b[2:])
	switch b[1] >> 4 {
	case 4:
		h.Src = netip.AddrFrom4([4]byte(b[16:20]))
		h.Dst = netip.AddrFrom4([4]byte(b[32:36]))
	case 6:
		h.Src = netip.AddrFrom16([16]byte(b[4:20]))
		h.Dst = netip.AddrFrom16([16]byte(b[20:36]))
	default:
		return fmt.Errorf("%w: IP version %d", ErrCMAHeader, b[1]>>4)
	}
	return nil
}

// Encode writes the header into the first CMAHeaderLen bytes of b. Src and
// Dst must be of one family; an IPv4-mapped IPv6 address counts as IPv4.
func (h *CMAHeader) Encode(b []byte) error {
	if len(b) < CMAHeaderLen {
		return fmt.Errorf("%w: %d bytes", ErrCMAHeader, len(b))
	}
	src, dst := h.Src.Unmap(), h.Dst.Unmap()
	if !src.IsValid() || !dst.IsValid() || src.Is4() != dst.Is4() {
		return fmt.Errorf("%w: addresses %v and %v are not of one family", ErrCMAHeader, h.Src, h.Dst)
	}
	clear(b[:CMAHeaderLen])
	b[0] = h.Version
	be.PutUint16(b[2:], h.SrcPort)
	if src.Is4() {
		b[1] = 0x40
		s, d := src.As4(), dst.As4()
		copy(b[16:], s[:])
		copy(b[32:], d[:])
	} else {
		b[1] = 0x60
		s, d := src.As16(), dst.As16()
		copy(b[4:], s[:])
		copy(b[20:], d[:])
	}
	return nil
}
