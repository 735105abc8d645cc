package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/pcapio"
	"github.com/softroce/softroce/rxe/link"
	"github.com/softroce/softroce/verbsapi"

	"github.com/softroce/softroce/internal/testenv"
)

func TestParseAddr(t *testing.T) {
	cases := []struct {
		in   string
		want string
		err  bool
	}{
		{"10.0.0.1", "10.0.0.1:0", false},
		{"127.0.0.2:4792", "127.0.0.2:4792", false},
		{"::1", "[::1]:0", false},
		{"[fd00::1]:4791", "[fd00::1]:4791", false},
		{"::ffff:10.0.0.1", "10.0.0.1:0", false},
		{"", "", true},
		{"host.example", "", true},
		{"10.0.0.1:99999", "", true},
	}
	for _, c := range cases {
		got, err := parseAddr(c.in)
		if c.err {
			assert.Error(t, err, c.in)
			continue
		}
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, got.String(), c.in)
	}
}

// The flags land in linkFlags with the command's defaults.
func TestAddLinkFlags(t *testing.T) {
	cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
	lf := addLinkFlags(cmd, linkFlags{Addr: "10.0.0.9"})
	assert.Equal(t, "mem", lf.Link, "default link")
	cmd.SetArgs([]string{"--link", "udp", "--addr", "[::1]:4792", "--peer-port", "4793", "--tap", "t0",
		"--pcap", "x.pcapng", "--fault", "loss=1%", "--mtu", "9000", "--fast-recovery"})
	require.NoError(t, cmd.Execute())
	assert.Equal(t, linkFlags{Link: "udp", Addr: "[::1]:4792", PeerPort: 4793, Tap: "t0", Pcap: "x.pcapng",
		Fault: "loss=1%", MTU: 9000, FastRecovery: true, BusyPoll: link.DefaultBusyPoll}, *lf)
	lc, err := lf.config()
	require.NoError(t, err)
	assert.True(t, lc.FastRecovery, "--fast-recovery reaches the device's configuration")
}

// --busy-poll reaches the udp link: its default, a window of the user's, or
// 0 for never (which the link spells negative, its 0 being the default).
func TestBusyPollFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{nil, link.DefaultBusyPoll},
		{[]string{"--busy-poll", "50us"}, 50 * time.Microsecond},
		{[]string{"--busy-poll", "0"}, -1},
	} {
		cmd := &cobra.Command{Use: "x", RunE: func(*cobra.Command, []string) error { return nil }}
		lf := addLinkFlags(cmd, linkFlags{})
		cmd.SetArgs(append([]string{"--link", "udp", "--addr", "127.0.0.2"}, tc.args...))
		require.NoError(t, cmd.Execute())
		lc, err := lf.config()
		require.NoError(t, err)
		assert.Equal(t, tc.want, lc.BusyPoll, "%v", tc.args)
	}
}

// openDevicePair gives two started devices that talk, through faults, with
// a capture; closing flushes the capture.
func TestOpenDevicePair(t *testing.T) {
	pcap := filepath.Join(t.TempDir(), "pair.pcapng")
	a, b, closeFn, err := openDevicePair(linkFlags{Link: "mem", Addr: "fd00::10", Pcap: pcap,
		Fault: "reorder=20%,reorder_delay=100us", Seed: 5}, "rxe0", "rxe1")
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddr("fd00::11"), mustGID(t, b, 1))
	var qps [2]*verbsapi.QP
	var cqs [2]*verbsapi.CQ
	var mrs [2]*verbsapi.MR
	for i, c := range []*verbsapi.Context{a, b} {
		pd, err := c.AllocPD()
		require.NoError(t, err)
		cqs[i], err = c.CreateCQ(16, nil)
		require.NoError(t, err)
		qps[i], err = pd.CreateQP(verbsapi.QPInitAttr{SendCQ: cqs[i], RecvCQ: cqs[i], QPType: verbsapi.RC,
			Cap: verbsapi.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		mrs[i], err = pd.RegMR(make([]byte, 8192), verbsapi.AccessAll)
		require.NoError(t, err)
	}
	ea, err := qps[0].Endpoint(1, 1)
	require.NoError(t, err)
	eb, err := qps[1].Endpoint(1, 2)
	require.NoError(t, err)
	require.NoError(t, qps[0].Connect(1, eb, nil))
	require.NoError(t, qps[1].Connect(2, ea, nil))
	copy(mrs[0].Bytes(), "over the pair")
	require.NoError(t, qps[0].PostSend(&verbsapi.SendWR{Opcode: verbsapi.WRWrite, Flags: verbsapi.SendSignaled,
		SGL: []verbsapi.SGE{mrs[0].SGE(0, 8192)}, RemoteAddr: mrs[1].Addr(), RKey: mrs[1].RKey()}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]verbsapi.WC, 1)
	_, err = cqs[0].PollWait(ctx, wc)
	require.NoError(t, err)
	assert.Equal(t, verbsapi.WCSuccess, wc[0].Status)
	assert.Equal(t, "over the pair", string(mrs[1].Bytes()[:13]))
	assert.NotZero(t, linkCounter(link.Counters(a.Device().Link()), "fault_frames"), "faults apply at a")
	assert.NotZero(t, linkCounter(link.Counters(b.Device().Link()), "fault_frames"), "faults apply at b")
	require.NoError(t, closeFn())

	r, err := pcapio.Open(pcap)
	require.NoError(t, err)
	defer r.Close()
	n := 0
	for {
		if _, err := r.Next(); err != nil {
			break
		}
		n++
	}
	assert.GreaterOrEqual(t, n, 9, "8 WRITE packets and an ACK at least")
}

func mustGID(t *testing.T, c *verbsapi.Context, i int) netip.Addr {
	t.Helper()
	g, err := c.QueryGID(1, i)
	require.NoError(t, err)
	return g
}

func TestOpenDeviceErrors(t *testing.T) {
	_, _, _, err := openDevicePair(linkFlags{Link: "udp", Addr: "127.0.0.1"}, "a", "b")
	assert.ErrorContains(t, err, "need --link mem")
	_, _, _, err = openDevicePair(linkFlags{Link: "mem", Addr: "255.255.255.255"}, "a", "b")
	assert.ErrorContains(t, err, "no next address")
	_, _, err = openDevice(linkFlags{Link: "tap", Addr: "fd00::1"}, "a")
	assert.ErrorContains(t, err, "needs an IPv4 address")
	_, _, err = openDevice(linkFlags{Link: "mem", Addr: "10.0.0.1", Pcap: filepath.Join(t.TempDir(), "no", "such", "dir.pcapng")}, "a")
	assert.ErrorContains(t, err, "--pcap")
	_, _, err = openDevice(linkFlags{Link: "mem", Addr: "10.0.0.1", Fault: "loss=2%,loss=3%"}, "a")
	assert.ErrorContains(t, err, "given twice")
}

// --addr6 gives a tap link's device an IPv6 GID after its IPv4-mapped one;
// other links and other addresses are refused.
func TestAddr6(t *testing.T) {
	for _, tc := range []struct {
		lf   linkFlags
		want string
	}{
		{linkFlags{Link: "udp", Addr: "127.0.0.1", Addr6: "fd00::1"}, "for the tap link"},
		{linkFlags{Link: "tap", Addr: "10.0.0.1", Addr6: "10.0.0.2"}, "want an IPv6 address"},
		{linkFlags{Link: "tap", Addr: "10.0.0.1", Addr6: "::ffff:10.0.0.2"}, "want an IPv6 address"},
		{linkFlags{Link: "tap", Addr: "fd00::1"}, "goes in --addr6"},
	} {
		_, _, err := openDevice(tc.lf, "a")
		assert.ErrorContains(t, err, tc.want, "%+v", tc.lf)
	}
	testenv.Root(t)
	testenv.TUN(t)
	name := fmt.Sprintf("sra6%d", os.Getpid()%100000)
	ctx, closeFn, err := openDevice(linkFlags{Link: "tap", Tap: name, Addr: "10.99.0.1", Addr6: "fd99::1"}, "rxe0")
	require.NoError(t, err)
	defer closeFn()
	v4, err := ctx.QueryGID(1, 1)
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddr("::ffff:10.99.0.1"), v4)
	v6, err := ctx.QueryGID(1, 2)
	require.NoError(t, err)
	assert.Equal(t, netip.MustParseAddr("fd99::1"), v6)
}
