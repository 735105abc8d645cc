package rxe

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe/link"
)

func TestGIDTableLayout(t *testing.T) {
	// MAC 52:54:00:77:00:03 is the one in the rxe IPv6 capture, whose
	// default GID is fe80::5054:ff:fe77:3.
	tests := []struct {
		name   string
		v4, v6 netip.Addr
		want   []string
	}{
		{"v4", ipB, netip.Addr{}, []string{"fe80::5054:ff:fe77:3", "::ffff:10.77.0.3"}},
		{"v6", netip.Addr{}, ip6B, []string{"fe80::5054:ff:fe77:3", "fd00::3"}},
		{"both", ipB, ip6B, []string{"fe80::5054:ff:fe77:3", "::ffff:10.77.0.3", "fd00::3"}},
		{"v6 is the default GID", netip.Addr{}, netip.MustParseAddr("fe80::5054:ff:fe77:3"),
			[]string{"fe80::5054:ff:fe77:3"}},
		{"v4-mapped given", netip.MustParseAddr("::ffff:10.77.0.3"), netip.Addr{},
			[]string{"fe80::5054:ff:fe77:3", "::ffff:10.77.0.3"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newDev(t, "rxe0", macB, tt.v4, tt.v6, 1500)
			var got []string
			for _, g := range d.GIDs() {
				assert.True(t, g.Is6(), "GIDs are 16-byte")
				got = append(got, g.String())
			}
			assert.Equal(t, tt.want, got)
			for i, w := range tt.want {
				g, err := d.QueryGID(i)
				require.NoError(t, err)
				assert.Equal(t, w, g.String())
				assert.Equal(t, i, d.GIDIndex(g))
				assert.Equal(t, i, d.GIDIndex(g.Unmap()), "plain IPv4 finds the mapped GID")
			}
			_, err := d.QueryGID(len(tt.want))
			assert.ErrorIs(t, err, ErrNoGID)
			_, err = d.QueryGID(-1)
			assert.ErrorIs(t, err, ErrNoGID)
			assert.Equal(t, -1, d.GIDIndex(netip.MustParseAddr("192.0.2.1")))
		})
	}
}

func TestNewValidates(t *testing.T) {
	_, err := New(Config{Name: "x"})
	assert.ErrorIs(t, err, ErrInvalid, "no address")
	_, err = New(Config{IPv4: ip6A})
	assert.ErrorIs(t, err, ErrInvalid, "IPv6 as IPv4")
	_, err = New(Config{IPv6: ipA})
	assert.ErrorIs(t, err, ErrInvalid, "IPv4 as IPv6")
	_, err = New(Config{IPv4: ipA, MTU: 300})
	assert.ErrorIs(t, err, ErrInvalid, "MTU too small")

	// Defaults come from the link.
	a, _ := link.NewMemPair(9000)
	d, err := New(Config{Link: a, IPv4: ipA})
	require.NoError(t, err)
	assert.Equal(t, "rxe0", d.Name())
	assert.Equal(t, a.MAC(), d.MAC())
	p, err := d.QueryPort(1)
	require.NoError(t, err)
	assert.Equal(t, qp.MTU(4096), p.ActiveMTU)
}

func TestActiveMTU(t *testing.T) {
	// rxe: eth_mtu_int_to_enum(netdev MTU) = the largest IB MTU <= MTU-80,
	// at least 256, at most 4096.
	tests := []struct {
		link int
		want qp.MTU
	}{
		{336, 256}, {576, 256}, {591, 256}, {592, 512}, {1103, 512}, {1104, 1024},
		{1280, 1024}, {1500, 1024}, {2127, 1024}, {2128, 2048}, {4096, 2048},
		{4175, 2048}, {4176, 4096}, {9000, 4096}, {65535, 4096},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, ActiveMTU(tt.link), "link MTU %d", tt.link)
		d := newDev(t, "rxe0", macA, ipA, netip.Addr{}, tt.link)
		p, err := d.QueryPort(1)
		require.NoError(t, err)
		assert.Equal(t, tt.want, p.ActiveMTU, "port of a %d-byte link", tt.link)
	}
}

func TestQueryDeviceAndPort(t *testing.T) {
	d := newDev(t, "rxe7", macB, ipB, netip.Addr{}, 1500)
	a := d.QueryDevice()
	assert.Equal(t, "softroce", a.FWVer)
	assert.Equal(t, uint64(0x505400fffe770003), a.NodeGUID, "EUI-64 of the MAC")
	assert.Equal(t, a.NodeGUID, a.SysImageGUID)
	assert.Equal(t, uint32(0xFFFFFF), a.VendorID)
	assert.Equal(t, 1<<20-16, a.MaxQP)
	assert.Equal(t, 1<<20, a.MaxQPWR)
	assert.Equal(t, 32767, a.MaxCQE)
	assert.Equal(t, 32, a.MaxSGE)
	assert.Equal(t, 512, a.MaxInlineData)
	assert.Equal(t, 524287, a.MaxMR)
	assert.Equal(t, 128, a.MaxQPRdAtom)
	assert.Equal(t, 128, a.MaxQPInitRdAtom)
	assert.Equal(t, AtomicHCA, a.AtomicCap)
	assert.Equal(t, 1, a.PhysPortCnt)
	assert.Equal(t, "rxe7", a.DeviceName)
	assert.NotZero(t, a.DeviceCapFlags&DevCapRCRNRNAKGen)
	assert.NotZero(t, a.DeviceCapFlags&DevCapMemWindow)
	assert.NotZero(t, a.DeviceCapFlags&DevCapMemWindowType2B)
	assert.Zero(t, a.DeviceCapFlags&DevCapMemMgtExtensions, "fast registration is not implemented")
	assert.Equal(t, 524287, a.MaxMW)

	p, err := d.QueryPort(1)
	require.NoError(t, err)
	assert.Equal(t, PortActive, p.State)
	assert.Equal(t, qp.MTU(4096), p.MaxMTU)
	assert.Equal(t, qp.MTU(1024), p.ActiveMTU)
	assert.Equal(t, 1024, p.GIDTblLen)
	assert.Equal(t, 1, p.PKeyTblLen)
	assert.Equal(t, uint8(LinkLayerEthernet), p.LinkLayer)
	_, err = d.QueryPort(2)
	assert.Error(t, err)
	k, err := d.QueryPKey(0)
	require.NoError(t, err)
	assert.Equal(t, uint16(0xFFFF), k)
	_, err = d.QueryPKey(1)
	assert.Error(t, err)
}

func TestCountersList(t *testing.T) {
	var c Counters
	c.SentPkts, c.RcvdPkts, c.BadICRC, c.BadPKey = 1, 2, 3, 4
	l := c.List()
	names := map[string]bool{}
	for _, e := range l {
		assert.False(t, names[e.Name], "duplicate %s", e.Name)
		names[e.Name] = true
	}
	// rxe's hw_counters, in rxe's order, first.
	rxeNames := []string{"sent_pkts", "rcvd_pkts", "duplicate_request", "out_of_seq_request",
		"rcvd_rnr_err", "send_rnr_err", "rcvd_seq_err", "ack_deferred", "retry_exceeded_err",
		"retry_rnr_exceeded_err", "completer_retry_err", "send_err", "link_downed", "rdma_sends",
		"rdma_recvs"}
	for i, n := range rxeNames {
		assert.Equal(t, n, l[i].Name)
	}
	assert.Equal(t, uint64(1), l[0].Value)
	assert.Equal(t, uint64(2), l[1].Value)
	byName := map[string]uint64{}
	for _, e := range l {
		byName[e.Name] = e.Value
	}
	assert.Equal(t, uint64(3), byName["rx_bad_icrc"])
	assert.Equal(t, uint64(4), byName["bad_pkey_cntr"])
	assert.Equal(t, l, c.List(), "stable order")
}
