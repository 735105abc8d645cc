package rxe_test

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/replay"
	"github.com/softroce/softroce/rxe"
)

// TestReplayRxeCaptures puts a softroce device in the place of either host
// of every QP pair of the kernel rxe captures (package replay rebuilds the
// host's QPN, PSNs, keys, memory and work requests from the trace) and
// requires it to send the same frames, byte for byte apart from the IPv4
// ID, and to complete, read and receive what the capture implies. Both ends
// of every RC and UC QP pair are replayed, so softroce is checked as
// requester and as responder against the kernel's own packets, ACKs, MSNs,
// read responses and atomic ACKs; the UD flows check datagrams, DETHs and
// the GRH area of receives. loss.pcap is replayed from its responder in
// package replay's tests: its requester's messages cannot be rebuilt from a
// capture that lacks the lost packets.
func TestReplayRxeCaptures(t *testing.T) {
	tests := []struct {
		file  string
		typ   qp.Type
		flows int // QP pairs of typ
	}{
		{"rc_pingpong.pcap", qp.RC, 1},
		{"rc_pingpong_ipv6.pcap", qp.RC, 1},
		{"uc_pingpong.pcap", qp.UC, 1},
		{"write.pcap", qp.RC, 2},
		{"read.pcap", qp.RC, 2},
		{"atomic.pcap", qp.RC, 2},
		{"send.pcap", qp.RC, 2},
		{"send.pcap", qp.UD, 1},
		{"veth_local_write.pcap", qp.RC, 1},
		{"ud_pingpong.pcap", qp.UD, 1},
		{"udaddy.pcap", qp.UD, 1},
		{"send_rdmacm.pcap", qp.RC, 2},
		{"rping.pcap", qp.RC, 1},
		// Kernel rxe and softroce's host-tap responder (QP 0x123, a UDP
		// source port of its own): either can be replayed.
		{"hosttap_respond.pcap", qp.RC, 1},
	}
	for _, tt := range tests {
		c, err := replay.Load(filepath.Join("..", "testdata", "pcaps", "rxe", tt.file))
		require.NoError(t, err)
		flows := 0
		for _, f := range c.Flows() {
			if f.Type != tt.typ {
				continue
			}
			flows++
			require.False(t, f.Lossy(), "%s: %s", tt.file, f)
			for _, host := range []replay.Side{f.A, f.B} {
				t.Run(fmt.Sprintf("%s/%s_qp%d", tt.file, host.Addr, host.QPN), func(t *testing.T) {
					r, err := replay.Run(f, host.Addr, replay.Options{Strict: true})
					require.NoError(t, err)
					require.NoError(t, r.Err())
					sent := 0
					for _, fr := range f.Frames {
						if fr.Src == host.Addr {
							sent++
						}
					}
					assert.Equal(t, sent, r.Matched, "every frame the host sent was reproduced")
					assert.Equal(t, len(f.Frames)-sent, r.Fed, "every frame of the peer was accepted")
					assert.Empty(t, r.Uncaptured)
					if tt.file != "rping.pcap" {
						// Only rping's client rewrites the buffer its
						// server reads; elsewhere memory is what the
						// peer's requests made it.
						assert.Zero(t, r.AppWrites)
					}
				})
			}
		}
		assert.Equal(t, tt.flows, flows, "%s: %s QP pairs", tt.file, tt.typ)
	}
}

// TestRegMRKey: a region registered with a chosen key (what package replay
// needs to stand in for a captured host) answers to that key at the chosen
// address, and the key's index is then taken.
func TestRegMRKey(t *testing.T) {
	d, err := rxe.New(rxe.Config{Name: "rxe0", IPv4: netip.MustParseAddr("10.0.0.1"), Seed: 1})
	require.NoError(t, err)
	pd, err := d.AllocPD()
	require.NoError(t, err)
	buf := make([]byte, 64)
	rw := qp.AccessLocalWrite | qp.AccessRemoteWrite | qp.AccessRemoteRead
	m, err := d.RegMRKey(pd, buf, 0x558912efd000, 0x270, rw)
	require.NoError(t, err)
	assert.Equal(t, uint32(0x270), m.LKey())
	assert.Equal(t, uint32(0x270), m.RKey())
	assert.Equal(t, uint64(0x558912efd000), m.Addr())

	_, err = d.RegMRKey(pd, buf, 0, 0x2ff, rw)
	assert.ErrorIs(t, err, rxe.ErrBusy, "index 2 is taken")
	_, err = d.RegMRKey(pd, buf, 0, 0x07, rw)
	assert.ErrorIs(t, err, rxe.ErrInvalid, "index 0 is no MR index")
	_, err = d.RegMRKey(pd, buf, 0, uint32(rxe.MaxMR+1)<<8, rw)
	assert.ErrorIs(t, err, rxe.ErrInvalid)

	local, err := d.RegMRKey(pd, buf, 0x1000, 0x1234, qp.AccessLocalWrite)
	require.NoError(t, err)
	assert.Equal(t, uint32(0x1234), local.LKey())
	assert.Zero(t, local.RKey(), "no remote access, no rkey")

	// Ordinary registrations go around the chosen indexes, and a chosen
	// key's index is free again after deregistration.
	for range 20 {
		o, err := d.RegMR(pd, buf, rw)
		require.NoError(t, err)
		assert.NotEqual(t, uint32(2), o.LKey()>>8)
		assert.NotEqual(t, uint32(0x12), o.LKey()>>8)
	}
	require.NoError(t, d.DeregMR(m))
	m2, err := d.RegMRKey(pd, buf, 0, 0x271, rw)
	require.NoError(t, err)
	assert.Equal(t, uint32(0x271), m2.RKey())
}
