package rxe

import (
	"errors"
	"io"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
)

func TestUDPSourcePortFormula(t *testing.T) {
	// Hand-computed from include/rdma/ib_verbs.h: fl = lqpn*rqpn folded by
	// >>20 and >>40, masked to 20 bits; sport = (fl&0x3fff ^ fl>>14&0x3f) | 0xc000.
	assert.Equal(t, uint32(17*17), FlowLabel(17, 17))
	assert.Equal(t, uint32(289), FlowLabel(17, 17))
	v := uint64(0xABCDE) * 0x12345
	v ^= v >> 20
	v ^= v >> 40
	assert.Equal(t, uint32(v&0xFFFFF), FlowLabel(0xABCDE, 0x12345))
	assert.Equal(t, uint16(0xC000|289), UDPSourcePort(0, 17, 17))
	assert.Equal(t, UDPSourcePort(0, 17, 18), UDPSourcePort(0, 18, 17), "symmetric in the QPNs")
	// A non-zero flow label is used as is: 0xFC000 folds onto the low bits.
	assert.Equal(t, uint16(0xC000|0x3F^0x1234), UDPSourcePort(0xFC000|0x1234, 1, 2))
	assert.Equal(t, uint16(0xC000), UDPSourcePort(0, 0, 5), "label 0 from a zero product")
	for _, q := range []uint32{0, 1, 17, 0xFFFFFF} {
		p := createSrcPort(q)
		assert.GreaterOrEqual(t, p, uint16(0xC000))
	}
}

// TestSourcePortsMatchRxeCaptures checks both formulas against what kernel
// rxe sent: for RC/UC flows set up without a flow label the port is
// rdma_get_udp_sport(0, local QPN, remote QPN), where the QPNs are the BTH
// destination QPs of the two directions; UD QPs keep their creation port,
// 0xC000 + hash_32(QPN, 14), with the QPN in the DETH.
func TestSourcePortsMatchRxeCaptures(t *testing.T) {
	type flow struct {
		src, dst netip.Addr
		sport    uint16
		destQP   uint32
	}
	files := []string{"rc_pingpong.pcap", "rc_pingpong_ipv6.pcap", "uc_pingpong.pcap", "ud_pingpong.pcap",
		"write.pcap", "read.pcap", "send.pcap", "atomic.pcap", "loss.pcap", "veth_local_write.pcap"}
	checked, checkedUD := 0, 0
	for _, name := range files {
		t.Run(name, func(t *testing.T) {
			r, err := pcapio.Open(filepath.Join("..", "testdata", "pcaps", "rxe", name))
			require.NoError(t, err)
			defer r.Close()
			flows := map[flow]bool{}
			for {
				rec, err := r.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				require.NoError(t, err)
				var f packet.Frame
				if rec.Frame(&f) != nil {
					continue
				}
				var p packet.Packet
				require.NoError(t, p.Decode(f.Transport))
				a := f.Addressing()
				if p.Info().Is(packet.HdrDETH) {
					assert.Equal(t, createSrcPort(p.DETH.SrcQP), a.SrcPort,
						"UD QP %d sends from 0xC000+hash_32(qpn,14)", p.DETH.SrcQP)
					checkedUD++
					continue
				}
				flows[flow{a.Src, a.Dst, a.SrcPort, p.BTH.DestQP}] = true
			}
			for fw := range flows {
				found := false
				for back := range flows {
					if back.src != fw.dst || back.dst != fw.src || back.sport != fw.sport {
						continue
					}
					found = true
					assert.Equal(t, UDPSourcePort(0, back.destQP, fw.destQP), fw.sport,
						"%s->%s QPN %d<->%d", fw.src, fw.dst, back.destQP, fw.destQP)
					checked++
				}
				assert.True(t, found, "flow %+v has a reverse direction", fw)
			}
		})
	}
	assert.Greater(t, checked, 10)
	assert.Greater(t, checkedUD, 1)
}
