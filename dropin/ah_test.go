package dropin

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestAHFromWire: addresses arrive as the kernel ABI carries them. The flow
// label keeps its low 20 bits, as the kernel and its drivers do (UCX passes
// 0xffffffff); an address without the GRH, or on a port that does not
// exist, is refused.
func TestAHFromWire(t *testing.T) {
	dgid := netip.MustParseAddr("::ffff:10.0.0.2").As16()
	tests := []struct {
		name  string
		in    wireAHAttr
		ok    bool
		label uint32
	}{
		{"plain", wireAHAttr{DGID: dgid, IsGlobal: 1, PortNum: 1, FlowLabel: 7}, true, 7},
		{"20-bit label", wireAHAttr{DGID: dgid, IsGlobal: 1, PortNum: 1, FlowLabel: 0xFFFFF}, true, 0xFFFFF},
		{"UCX's all-ones label", wireAHAttr{DGID: dgid, IsGlobal: 1, PortNum: 1, FlowLabel: 0xFFFFFFFF, DLID: 0xC000}, true, 0xFFFFF},
		{"no GRH", wireAHAttr{DGID: dgid, PortNum: 1}, false, 0},
		{"port 2", wireAHAttr{DGID: dgid, IsGlobal: 1, PortNum: 2}, false, 0},
	}
	for _, tt := range tests {
		a, ok := ahFromWire(&tt.in)
		assert.Equal(t, tt.ok, ok, tt.name)
		if ok {
			assert.Equal(t, tt.label, a.FlowLabel, tt.name)
		}
	}
}
