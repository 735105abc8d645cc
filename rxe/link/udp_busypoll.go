//go:build linux

package link

import "time"

// Busy polling after bulk batches.
//
// A receive loop that waits in the kernel between batches costs a
// wake-up each time: the sender's sendmsg, which on loopback delivers the
// datagrams itself, pays for waking this thread, and the thread starts
// late. While a bulk flow arrives, the next batch is usually a few
// microseconds behind the last, so after a batch of at least busyPollMin
// datagrams the link asks the socket again, without waiting, for up to
// UDPOptions.BusyPoll before it parks. Ping-pong traffic (batches of one
// or two) never polls, nor an idle link: the CPU spent is bounded by the
// window per bulk batch. SO_BUSY_POLL, the kernel's own, polls a NIC's
// queue and does nothing for loopback or a virtual NIC without NAPI
// polling, so the link polls its socket itself.
//
// Measured on the 2-core machine (BenchmarkUDPLoopback, 64 KiB WRITEs at
// MTU 4096, two devices in one process): 2,998-3,130 MB/s without, 3,443-
// 3,640 with a 10 us window; the windows tried, on a stream of WRITEs
// alone: 3 us 3.4-3.5 GB/s, 5 us 3.6-3.7, 10 us 4.3, 20 us 3.9-4.1, 100
// us 4.0, 300 us 3.8 (3.1 without); polling after every batch (the
// sender's ACKs too) 3.2-3.3.

// DefaultBusyPoll is UDPOptions.BusyPoll's default.
const DefaultBusyPoll = 10 * time.Microsecond

// busyPollMin is the smallest batch, in datagrams, after which the link
// polls.
const busyPollMin = 8

// busyPollWindow returns the window UDPOptions.BusyPoll asks for: 0 for
// none.
func busyPollWindow(o time.Duration) time.Duration {
	switch {
	case o == 0:
		return DefaultBusyPoll
	case o < 0:
		return 0
	}
	return o
}

// armBusyPoll decides, from the batch just handed out, whether the next
// receive polls, until when, and reports whether it does. It reads the
// clock (now) only when it does: ping-pong's receives never do.
func (r *udpRx) armBusyPoll(now func() time.Time) bool {
	r.pollUntil = time.Time{}
	if r.pollWindow <= 0 || r.dgrams < busyPollMin {
		return false
	}
	r.pollUntil = now().Add(r.pollWindow)
	return true
}

// keepPolling reports whether a receive that found nothing asks again
// rather than waiting; the clock is read only inside a window.
func (r *udpRx) keepPolling(now func() time.Time) bool {
	return !r.pollUntil.IsZero() && now().Before(r.pollUntil)
}
