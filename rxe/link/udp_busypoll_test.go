//go:build linux

package link

import (
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The policy: a window only after a batch of busyPollMin datagrams or
// more, as long as UDPOptions.BusyPoll says (0: the default; negative:
// never), and no polling once it has passed.
func TestBusyPollPolicy(t *testing.T) {
	assert.Equal(t, DefaultBusyPoll, busyPollWindow(0))
	assert.Equal(t, time.Duration(0), busyPollWindow(-1))
	assert.Equal(t, 50*time.Microsecond, busyPollWindow(50*time.Microsecond))

	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name   string
		window time.Duration
		dgrams int
		polls  bool
	}{
		{"ping-pong", DefaultBusyPoll, 1, false},
		{"two", DefaultBusyPoll, 2, false},
		{"just under", DefaultBusyPoll, busyPollMin - 1, false},
		{"bulk", DefaultBusyPoll, busyPollMin, true},
		{"a GRO run", DefaultBusyPoll, 15, true},
		{"off", 0, 64, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at := func(d time.Duration) func() time.Time { return func() time.Time { return t0.Add(d) } }
			r := udpRx{pollWindow: tc.window, dgrams: tc.dgrams}
			assert.Equal(t, tc.polls, r.armBusyPoll(at(0)))
			assert.Equal(t, tc.polls, r.keepPolling(at(tc.window/2)), "within the window")
			assert.False(t, r.keepPolling(at(tc.window)), "at its end")
			assert.False(t, r.keepPolling(at(time.Second)), "after it")
		})
	}
}

// On a link, a batch of bulk datagrams opens a window and a lone datagram
// does not; with BusyPoll negative none opens. Every datagram arrives
// either way.
func TestBusyPollWindows(t *testing.T) {
	for _, tc := range []struct {
		name     string
		busyPoll time.Duration
		windows  uint64
	}{
		{"default", 0, 1},
		{"off", -1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpB, 24802), MTU: 1500, Batch: 8,
				NoAutoGRO: true, BusyPoll: tc.busyPoll})
			a := listenUDP(t, UDPOptions{Addr: netip.AddrPortFrom(udpA, 24803), PeerPort: 24802, MTU: 1500, NoGSO: true})
			send := func(n int) {
				t.Helper()
				batch := make([]Frame, n)
				for i := range batch {
					batch[i] = Frame{Data: udpFrame(t, a, udpB, 200, uint32(i), 0, 64)}
				}
				k, err := a.Send(batch)
				require.NoError(t, err)
				require.Equal(t, n, k)
			}
			send(1)
			require.Len(t, recvN(t, b, 1), 1)
			send(8)
			require.Len(t, recvN(t, b, 8), 8)
			assert.Zero(t, b.Stats().RxBusyPolls, "a lone datagram opens no window")
			send(1)
			require.Len(t, recvN(t, b, 1), 1)
			s := b.Stats()
			assert.Equal(t, tc.windows, s.RxBusyPolls, "after the batch of 8")
			assert.LessOrEqual(t, s.RxBusyPollHits, s.RxBusyPolls)
		})
	}
}
