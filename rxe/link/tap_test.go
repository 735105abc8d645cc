//go:build linux

package link

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/softroce/softroce/packet"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/internal/testenv"
)

func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	require.NoError(t, err, "ip %v: %s", args, out)
}

// bridgedTAPs returns two TAP links on two interfaces joined by a Linux
// bridge, all removed when the test ends.
func bridgedTAPs(t *testing.T) (a, b *TAP) {
	testenv.Root(t)
	testenv.TUN(t)
	testenv.Tools(t, "apt-get install iproute2", "ip")
	id := os.Getpid() % 100000
	br := fmt.Sprintf("srtbr%d", id)
	ipCmd(t, "link", "add", br, "type", "bridge")
	t.Cleanup(func() { exec.Command("ip", "link", "del", br).Run() })
	open := func(name string, v4, v6 string) *TAP {
		l, err := OpenTAP(TAPOptions{
			Name: name, IPv4: netip.MustParseAddr(v4), IPv6: netip.MustParseAddr(v6),
			ResolveTimeout: 50 * time.Millisecond,
		})
		require.NoError(t, err)
		t.Cleanup(func() {
			l.Close()
			exec.Command("ip", "link", "del", name).Run()
		})
		ipCmd(t, "link", "set", name, "master", br)
		return l
	}
	a = open(fmt.Sprintf("srta%d", id), "10.91.0.1", "fd00:91::1")
	b = open(fmt.Sprintf("srtb%d", id), "10.91.0.2", "fd00:91::2")
	ipCmd(t, "link", "set", br, "up")
	return a, b
}

func TestTAPLinkExchange(t *testing.T) {
	a, b := bridgedTAPs(t)
	var _ Link = a
	assert.Equal(t, [6]byte{2, 0, 10, 91, 0, 1}, a.MAC())
	ip4A, ip4B := netip.MustParseAddr("10.91.0.1"), netip.MustParseAddr("10.91.0.2")
	ip6A, ip6B := netip.MustParseAddr("fd00:91::1"), netip.MustParseAddr("fd00:91::2")

	// A to B: the device leaves the MACs zero; ARP resolves B.
	var sent [][]byte
	for i := 0; i < 3; i++ {
		f := roceFrame(t, [6]byte{}, [6]byte{}, ip4A, ip4B, 100+i, uint32(i))
		sent = append(sent, f)
		_, err := a.Send([]Frame{{Data: f}})
		require.NoError(t, err)
	}
	got := recvN(t, b, 3)
	for i, g := range got {
		assert.Equal(t, b.MAC(), [6]byte(g[0:6]), "destination MAC filled in")
		assert.Equal(t, a.MAC(), [6]byte(g[6:12]))
		assert.Equal(t, sent[i][12:], g[12:])
	}
	assert.GreaterOrEqual(t, a.Stats().ARPRequests, uint64(1))
	assert.GreaterOrEqual(t, b.Stats().ARPReplies, uint64(1))

	// B to A: B learned A from its ARP request, no resolution needed.
	back := roceFrame(t, [6]byte{}, [6]byte{}, ip4B, ip4A, 64, 9)
	_, err := b.Send([]Frame{{Data: back}})
	require.NoError(t, err)
	g := recvN(t, a, 1)[0]
	assert.Equal(t, back[12:], g[12:])
	assert.Equal(t, a.MAC(), [6]byte(g[0:6]))
	assert.Zero(t, b.Stats().ARPRequests)

	// IPv6: neighbour solicitation and advertisement.
	f6 := roceFrame(t, [6]byte{}, [6]byte{}, ip6A, ip6B, 200, 7)
	_, err = a.Send([]Frame{{Data: f6}})
	require.NoError(t, err)
	g = recvN(t, b, 1)[0]
	assert.Equal(t, f6[12:], g[12:])
	var pf packet.Frame
	require.NoError(t, packet.ParseFrame(g, &pf))
	assert.True(t, pf.ICRCOK())
	assert.GreaterOrEqual(t, a.Stats().NDPSolicits, uint64(1))
	assert.GreaterOrEqual(t, b.Stats().NDPAdverts, uint64(1))
	f6b := roceFrame(t, [6]byte{}, [6]byte{}, ip6B, ip6A, 20, 8)
	_, err = b.Send([]Frame{{Data: f6b}})
	require.NoError(t, err)
	assert.Equal(t, f6b[12:], recvN(t, a, 1)[0][12:])
}

func TestTAPLinkDropsAndIgnores(t *testing.T) {
	a, b := bridgedTAPs(t)
	ip4A, ip4B := netip.MustParseAddr("10.91.0.1"), netip.MustParseAddr("10.91.0.2")

	// Nobody answers for 10.91.0.99: after the tries, queued frames drop.
	nobody := roceFrame(t, [6]byte{}, [6]byte{}, ip4A, netip.MustParseAddr("10.91.0.99"), 10, 1)
	_, err := a.Send([]Frame{{Data: nobody}, {Data: nobody}})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return a.Stats().TxResolveDrop == 2 }, 5*time.Second, 10*time.Millisecond)
	assert.Equal(t, uint64(6), a.Stats().ARPRequests, "the default tries")

	big := roceFrame(t, [6]byte{}, [6]byte{}, ip4A, ip4B, 1500, 2)
	_, err = a.Send([]Frame{{Data: big}, {Data: []byte("not a frame at all")}})
	require.NoError(t, err)
	assert.Equal(t, uint64(1), a.Stats().TxOversize)
	assert.Equal(t, uint64(1), a.Stats().TxBadFrame)

	// Frames for another MAC, or for our MAC but another IP, or not RoCE,
	// reach B's interface (the bridge floods unknown MACs) and are ignored.
	before := b.Stats()
	other := roceFrame(t, [6]byte{}, [6]byte{}, ip4A, netip.MustParseAddr("10.91.0.7"), 10, 3)
	require.NoError(t, a.writeFrame(other, [6]byte{2, 9, 9, 9, 9, 9}))
	require.NoError(t, a.writeFrame(other, b.MAC()))
	notRoCE := bytes.Clone(roceFrame(t, [6]byte{}, [6]byte{}, ip4A, ip4B, 10, 4))
	notRoCE[packet.EthernetLen+packet.IPv4Len+3] = 0x01 // UDP port 4609
	require.NoError(t, a.writeFrame(notRoCE, b.MAC()))
	// A RoCE frame last: when it arrives, the others have been seen.
	good := roceFrame(t, [6]byte{}, [6]byte{}, ip4A, ip4B, 10, 5)
	require.NoError(t, a.writeFrame(good, b.MAC()))
	g := recvN(t, b, 1)[0]
	assert.Equal(t, good[12:], g[12:])
	after := b.Stats()
	assert.GreaterOrEqual(t, after.RxNotForUs-before.RxNotForUs, uint64(2))
	assert.Equal(t, uint64(1), after.RxNotRoCE-before.RxNotRoCE)
	assert.Equal(t, uint64(1), after.RxFrames-before.RxFrames)
}

func TestTAPLinkNeedsAddress(t *testing.T) {
	_, err := OpenTAP(TAPOptions{})
	assert.ErrorContains(t, err, "IPv4 address is required")
}

func TestTAPKeepsPersistentInterface(t *testing.T) {
	testenv.Root(t)
	testenv.TUN(t)
	name := fmt.Sprintf("srtp%d", os.Getpid()%100000)
	ipCmd(t, "tuntap", "add", "dev", name, "mode", "tap")
	t.Cleanup(func() { exec.Command("ip", "link", "del", name).Run() })
	require.True(t, tapPersistent(name))
	l, err := OpenTAP(TAPOptions{Name: name, IPv4: netip.MustParseAddr("10.93.0.1")})
	require.NoError(t, err)
	require.NoError(t, l.Close())
	require.True(t, tapPersistent(name), "closing the link must leave a persistent TAP in place")
	require.False(t, tapPersistent("srt-no-such-if"))
}
