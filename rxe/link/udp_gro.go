//go:build linux

package link

import "golang.org/x/sys/unix"

// Receive offload (UDP_GRO) on the UDP link.
//
// With UDP_GRO set on its socket the kernel may hand the link several
// datagrams of one flow as one message, with their size in a control
// message: the run a GSO sender sent (on loopback it arrives whole, never
// cut up), or, from a NIC that coalesces, datagrams that came in a row. One
// copy and one socket-queue entry then carry many packets instead of one
// each. The link cuts such a message back into its datagrams (udp.go,
// handOut). Each needs room in front of it for the headers the link
// rebuilds, so the link lays each message's buffer out for the datagram
// size the last GRO message had (chunk): one iovec per datagram, each
// behind its own headroom, so that the kernel's copy puts every datagram
// of a message of that size where it is rebuilt in place. A datagram the
// layout does not fit (another size, or a lone datagram longer than a
// chunk) is gathered into a spare buffer: one copy, and the next layout
// follows the new size. Sizes under groMinChunk get one contiguous buffer
// per message (the iovecs and headroom would cost more than the copies).
// The datagrams' own IP headers are gone, but they differed only in the
// IPv4 ID, which a socket does not show anyway (see udp.go).
//
// A GRO message can be as long as a UDP datagram can (64 KiB), so message
// buffers are that long, and a little more for the headroom, when GRO is
// on: about 4.5 MiB for a link's 64 messages at MTU 1500, instead of 100
// KiB.

// groMsgLen is the receive buffer per message with GRO: the largest UDP
// payload, plus one byte to see truncation.
const groMsgLen = 0xFFFF + 1

// groMinChunk is the smallest datagram size message buffers are laid out
// for (see above).
const groMinChunk = 1024

// groMaxIov is the most iovecs a message's layout uses.
const groMaxIov = groMsgLen/groMinChunk + 1

// Adaptive GRO. The link turns UDP_GRO on after groOnAfter full batches
// in a row (bulk: the socket queue had more than a batch waiting) and off
// after groOffAfter batches in a row of at most two datagrams
// (ping-pong), so that request-response traffic never waits on it:
// datagrams, not messages, since with GRO on one message of a bulk flow
// holds a run of them. Once on, the buffers stay laid out for GRO (a
// message coalesced before the switch may still come, and is cut at the
// last run's datagram size: the socket no longer says it); only the socket
// option goes back and forth.
const (
	groOnAfter  = 4
	groOffAfter = 32
)

// adaptGRO looks at the last recvmmsg's batch and switches GRO on or off.
// Called between batches, by the one receiving goroutine.
func (u *UDP) adaptGRO() {
	r := &u.rx
	if r.fixed {
		return
	}
	switch {
	case r.got == len(r.hdrs):
		r.full, r.thin = r.full+1, 0
	case r.dgrams <= 2:
		r.full, r.thin = 0, r.thin+1
	default:
		r.full, r.thin = 0, 0
	}
	on := r.sockGRO
	if !on && r.full >= groOnAfter {
		on = true
	} else if on && r.thin >= groOffAfter {
		on = false
	}
	if on == r.sockGRO {
		return
	}
	if on && !r.gro {
		r.initGRO(len(r.hdrs), r.mtu)
		r.gro = true
	}
	v := 0
	if on {
		v = 1
	}
	var err error
	u.raw.Control(func(fd uintptr) { err = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, v) })
	if err != nil {
		r.fixed = true // a kernel without UDP_GRO: stay as we are
		return
	}
	r.sockGRO = on
	r.full, r.thin = 0, 0
	r.groSwitches++
}

// enableGRO turns UDP_GRO on for the socket, reporting whether the kernel
// has it (Linux 5.0 and later).
func enableGRO(fd uintptr) bool {
	return unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil
}

// initGRO allocates the buffers for n messages with GRO on a link of the
// given MTU: per message, room for a 64 KiB message laid out in chunks of
// any size from groMinChunk to the MTU, each behind headroom.
func (r *udpRx) initGRO(n, mtu int) {
	r.maxChunk = mtu + 1
	region := groMsgLen + r.maxChunk + groMaxIov*headroom
	r.bufs = carve(n, region)
	r.spare = carve(n, headroom+mtu+1)
	r.giovs = make([][]unix.Iovec, n)
	for i := range r.giovs {
		r.giovs[i] = make([]unix.Iovec, groMaxIov)
	}
	r.chunk = -1
	r.layout(0)
}

// layout sets the message buffers' iovecs for datagrams of chunk bytes, or
// for one contiguous buffer when chunk is 0 or out of range.
func (r *udpRx) layout(chunk int) {
	if chunk < groMinChunk || chunk > r.maxChunk {
		chunk = 0
	}
	if chunk == r.chunk {
		return
	}
	r.chunk = chunk
	for i, buf := range r.bufs {
		iovs := r.giovs[i]
		if chunk == 0 {
			iovs[0].Base = &buf[headroom]
			iovs[0].SetLen(groMsgLen)
			r.niov = 1
			continue
		}
		c := 0
		for total := 0; total < groMsgLen; c, total = c+1, total+chunk {
			iovs[c].Base = &buf[c*(headroom+chunk)+headroom]
			iovs[c].SetLen(chunk)
		}
		r.niov = c
	}
}

// datagram returns the buffer holding datagram k (of length n, stride
// bytes apart) of message i, with headroom in front of it: in place when
// the layout put it there, otherwise gathered into the next spare buffer.
func (r *udpRx) datagram(i, k, stride, n int, spare *int) []byte {
	buf := r.bufs[i]
	if r.chunk == 0 {
		if k == 0 {
			return buf
		}
	} else if stride == r.chunk || (k == 0 && n <= r.chunk) {
		return buf[k*(headroom+r.chunk):]
	}
	dst := r.spare[*spare]
	*spare++
	if headroom+n > len(dst) {
		return dst // too long for the MTU: the caller drops it
	}
	v := k * stride
	for out := dst[headroom : headroom+n]; len(out) > 0; {
		src := buf[headroom+v:]
		if r.chunk > 0 {
			c, o := v/r.chunk, v%r.chunk
			start := c*(headroom+r.chunk) + headroom
			src = buf[start+o : start+r.chunk]
		}
		m := copy(out, src)
		out, v = out[m:], v+m
	}
	return dst
}
