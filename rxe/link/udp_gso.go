//go:build linux

package link

import (
	"github.com/softroce/softroce/packet"
	"golang.org/x/sys/unix"
)

// Segmentation offload (UDP_SEGMENT, "UDP GSO") on the UDP link.
//
// Most of the cost of sending a datagram through a kernel socket is per
// datagram: the trip through IP, the device and, on loopback, the receive
// path up to the peer's socket. With UDP_SEGMENT the link hands the kernel
// a run of packets of one size to one destination as a single send; the
// kernel makes one buffer of it, takes it through the stack once and cuts it
// into datagrams of the given size as late as it can (at the receiving
// socket on loopback, at the device elsewhere, or in the NIC). The datagrams
// on the wire are the same as without: each carries one RoCE packet, with
// its own UDP and IP header.
//
// One header field differs. The kernel numbers the IPv4 identification of
// the segments upwards from the run's first: the link's datagrams are DF
// from an unconnected socket, so the first has ID 0 (as without GSO) and
// segment k has ID k. The ICRC covers the ID, and the device computed it
// for ID 0, so the link corrects the ICRC of segment k >= 1
// (packet.IPv4IDCorrections; the arithmetic is explained in packet/ipid.go).
// The corrected ICRC goes out from a buffer of the link's (a second iovec), so the
// caller's frame is not written to. A receiver that sees the ID (rxe) then
// finds the ICRC right; one that does not (this link) checks it with the ID
// unknown, as it does for every IPv4 sender. IPv6 has no ID: nothing to
// correct.
//
// A run is consecutive frames to the same address with the same TOS and
// TTL, all of the first one's length but the last, which may be shorter;
// it ends at maxGSOSegs segments or before the UDP length would pass 65535.
// The kernel is probed for UDP_SEGMENT when the link opens (Linux 4.18 and
// later have it). A run the kernel refuses is counted as that many refused
// datagrams (the transport's retransmission recovers them); if the refusal
// is EIO, the route cannot segment (no checksum offload, IPsec), and the
// link stops using GSO (gsoOff). Other refusals (EINVAL past the path MTU)
// would refuse the datagrams one by one too.

// maxGSOSegs bounds the segments of one send (UDP_MAX_SEGMENTS was 64 until
// Linux 6.9).
const maxGSOSegs = packet.MaxIPv4IDCorrection

// maxUDPLen is the largest UDP length (header and payload) the 16-bit
// length fields allow.
const maxUDPLen = 0xFFFF

// probeGSO reports whether the kernel accepts UDP_SEGMENT on the socket:
// setting it to 0 (no default segment size) changes nothing else.
func probeGSO(fd uintptr) bool {
	return unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_SEGMENT, 0) == nil
}

// maxRunSegs returns how many segments of seg bytes of UDP payload one send
// may carry, for the given IP header length.
func maxRunSegs(seg, ipLen int) int {
	if seg <= 0 {
		return 1
	}
	return max(1, min(maxGSOSegs, (maxUDPLen-ipLen-packet.UDPLen)/seg))
}
