package netsim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/fault"
	"github.com/softroce/softroce/packet"
)

// ectFrame is roceFrame with the given ECN codepoint and a correct IPv4
// header checksum.
func ectFrame(n int, seq uint32, ecn uint8) []byte {
	f := roceFrame(macB, macA, ipB, n, seq)
	f[15] = ecn
	f[22] = 64
	fixCsum(f)
	return f
}

func TestREDMarking(t *testing.T) {
	tests := []struct {
		name       string
		red        RED
		ecn        uint8
		wantMarked func(k int) bool // by the frame's position k (k frames of 1000 B ahead)
	}{
		{"below kmin", RED{Kmin: 100_000, Kmax: 200_000, Pmax: 1}, packet.ECNECT0, func(int) bool { return false }},
		{"above kmax", RED{Kmin: 0, Kmax: 3000, Pmax: 0}, packet.ECNECT0, func(k int) bool { return k*1000 > 3000 }},
		{"step at kmin with pmax 1 and kmin = kmax", RED{Kmin: 5000, Kmax: 5000, Pmax: 1}, packet.ECNECT1, func(k int) bool { return k*1000 > 5000 }},
		{"not ECN-capable", RED{Kmin: 0, Kmax: 1, Pmax: 1}, packet.ECNNotECT, func(int) bool { return false }},
	}
	for _, tt := range tests {
		l, _, ab, rb := pair(PipeConfig{Bandwidth: 1e9, Delay: Microsecond})
		require.NoError(t, ab.SetECN(tt.red, fault.Stream(1, "red")))
		for i := range 20 {
			ab.Send(ectFrame(1000, uint32(i), tt.ecn))
		}
		l.RunUntil(Never)
		require.Len(t, rb.data, 20, tt.name)
		marked := 0
		for k, f := range rb.data {
			ecn, _ := packet.FrameECN(f)
			want := tt.ecn
			if tt.wantMarked(k) {
				want = packet.ECNCE
				marked++
			}
			assert.Equal(t, want, ecn, "%s: frame %d", tt.name, k)
			var fr packet.Frame
			// ParseFrame checks the IPv4 header checksum; the frame is not a
			// valid RoCE packet beyond that.
			if err := packet.ParseFrame(f, &fr); err != nil {
				assert.NotContains(t, err.Error(), "checksum", tt.name)
			}
		}
		assert.Equal(t, uint64(marked), ab.Counters().ECNMarked, tt.name)
	}
}

// TestREDProbability: between Kmin and Kmax the share of marked frames
// follows Pmax·(q-Kmin)/(Kmax-Kmin), and the draws are a function of the
// seed.
func TestREDProbability(t *testing.T) {
	run := func(seed uint64) (uint64, []bool) {
		l, _, ab, rb := pair(PipeConfig{Bandwidth: 1e9, Delay: Microsecond})
		// Every frame finds 10 KB ahead: 10 frames queued, kept full by
		// sending one per serialization time.
		require.NoError(t, ab.SetECN(RED{Kmin: 0, Kmax: 20_000, Pmax: 0.4}, fault.Stream(seed, "red")))
		for i := range 10 {
			ab.Send(ectFrame(1000, uint32(i), packet.ECNECT0))
		}
		ser := Time(1024 * 8)
		for i := range 4000 {
			l.At(Time(i+1)*ser, func() { ab.Send(ectFrame(1000, uint32(i), packet.ECNECT0)) })
		}
		l.RunUntil(Never)
		var marks []bool
		for _, f := range rb.data[10:] {
			e, _ := packet.FrameECN(f)
			marks = append(marks, e == packet.ECNCE)
		}
		return ab.Counters().ECNMarked, marks
	}
	n, m1 := run(1)
	// q is 9 or 10 KB: p = 0.4·q/20 KB, about 0.19.
	assert.InDelta(t, 0.19, float64(n)/4010, 0.03)
	_, m2 := run(1)
	assert.Equal(t, m1, m2, "same seed, same marks")
	_, m3 := run(2)
	assert.NotEqual(t, m1, m3)
}

func TestREDCheck(t *testing.T) {
	_, _, ab, _ := pair(PipeConfig{})
	for _, bad := range []RED{{Kmin: 10, Kmax: 5, Pmax: 1}, {Kmax: 5, Pmax: 1.5}, {Kmin: -1, Kmax: 5}} {
		assert.Error(t, ab.SetECN(bad, nil))
	}
	require.NoError(t, ab.SetECN(RED{}, nil))
	assert.Equal(t, RED{}, ab.ECN())
}
