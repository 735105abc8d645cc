package rxe

import (
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestFastRecovery loses packets the way that costs kernel rxe a local ACK
// timeout (timeout 14: about 67 ms) and checks that softroce's recovery
// (Config.FastRecovery) needs no timer or only a short one, while by
// default the timeout is still what recovers, as on kernel rxe, except for a
// lost READ response, which softroce asks for again at once either way
// (kernel rxe waits for the next READ's responses or the timer). Time in
// this network moves only when nothing is in flight, to the next deadline.
func TestFastRecovery(t *testing.T) {
	const timeout = qp.Time(4096 << 14)
	for _, tc := range []struct {
		name string
		// warm, when set, is a WRITE of this many bytes, with one loss,
		// before the one measured: the requester has heard of a loss.
		warm int
		op   qp.WROpcode
		size int
		// drop reports whether to lose a frame: n counts the frames of
		// the same opcode and PSN seen so far (0 for the first).
		drop func(op packet.Opcode, psnOff uint32, n int) bool
		fast qp.Time // at most this long with softroce's recovery
		// always: the default recovers as fast (no timer) too.
		always bool
	}{
		{
			// The responder NAKs PSN 2, the go-back-N loses it again: the
			// responder NAKs once more when the resends come round without
			// it, and the requester goes back again at once.
			name: "resend lost again", op: qp.WRWrite, size: 8 << 10,
			drop: func(op packet.Opcode, off uint32, n int) bool {
				return op == packet.RCWriteMiddle && off == 2 && n < 2
			},
			fast: 0,
		},
		{
			// A READ response goes missing: the next one shows the gap
			// and the requester asks again for the rest at once.
			name: "read response lost", op: qp.WRRead, size: 8 << 10,
			drop: func(op packet.Opcode, off uint32, n int) bool {
				return op == packet.RCReadResponseMid && off == 3 && n == 0
			},
			fast: 0, always: true,
		},
		{
			// The NAK itself is lost: silence until a timer. After a loss
			// heard of, the early retry ends it within a few round trips.
			name: "NAK lost", warm: 8 << 10, op: qp.WRWrite, size: 8 << 10,
			drop: func(op packet.Opcode, off uint32, n int) bool {
				return (op == packet.RCWriteMiddle && off == 2 || op == packet.RCAcknowledge && off == 2) && n == 0
			},
			fast: timeout / 8,
		},
	} {
		for _, kernel := range []bool{false, true} {
			name := tc.name + "/fast"
			if kernel {
				name = tc.name + "/kernel retry"
			}
			t.Run(name, func(t *testing.T) {
				p := newRecoveryPair(t, kernel)
				var base uint32
				seen := map[[2]uint32]int{}
				measuring, dropped := false, 0
				p.n.filter = func(from, to *Device, f []byte) bool {
					var fr packet.Frame
					require.NoError(t, packet.ParseFrame(f, &fr))
					var pkt packet.Packet
					require.NoError(t, pkt.Decode(fr.Transport))
					off := pkt.BTH.PSN - base
					k := [2]uint32{uint32(pkt.BTH.Opcode), off}
					n := seen[k]
					seen[k]++
					if !measuring {
						// The warm-up loses its third packet once.
						return !(pkt.BTH.Opcode == packet.RCWriteMiddle && off == 2 && n == 0)
					}
					if pkt.BTH.Opcode == packet.RCAcknowledge && pkt.AETH.Syndrome.Type() != packet.AckTypeNAK {
						return true
					}
					if tc.drop(pkt.BTH.Opcode, off, n) {
						dropped++
						return false
					}
					return true
				}
				if tc.warm > 0 {
					base = p.a.qp.Query().SQPSN
					p.post(t, qp.WRWrite, tc.warm)
					require.Equal(t, qp.WCSuccess, p.n.poll(t, p.a.scq, 1)[0].Status)
					clear(seen)
				}
				measuring = true
				base = p.nextPSN()
				t0 := p.n.now
				p.post(t, tc.op, tc.size)
				require.Equal(t, qp.WCSuccess, p.n.poll(t, p.a.scq, 1)[0].Status)
				took := p.n.now - t0
				require.NotZero(t, dropped, "the case lost nothing")
				if kernel && tc.always {
					assert.Zero(t, took, "the default asks again at once too")
					assert.Zero(t, p.da.Counters().EarlyRetries)
				} else if kernel {
					assert.GreaterOrEqual(t, took, timeout, "kernel rxe's recovery waits out the local ACK timeout")
					assert.Zero(t, p.da.Counters().EarlyRetries)
				} else {
					assert.LessOrEqual(t, took, tc.fast, "softroce's recovery")
				}
				assert.Equal(t, p.bm.Bytes()[:tc.size], p.am.Bytes()[:tc.size])
			})
		}
	}
}

type recoveryPair struct {
	da, db *Device
	a, b   *side
	am, bm *MR
	n      *net
	sent   uint32 // PSNs the requester has used
}

func newRecoveryPair(t *testing.T, kernelRetry bool) *recoveryPair {
	t.Helper()
	da, err := New(Config{Name: "rxe0", MAC: macA, IPv4: ipA, MTU: 1500, Seed: 5, FastRecovery: !kernelRetry})
	require.NoError(t, err)
	db, err := New(Config{Name: "rxe1", MAC: macB, IPv4: ipB, MTU: 1500, Seed: 6, FastRecovery: !kernelRetry})
	require.NoError(t, err)
	p := &recoveryPair{da: da, db: db}
	p.a, p.b = connect(t, da, db, qp.RC, 64, 1024)
	p.n = newNet(da, db)
	p.am, err = da.RegMR(p.a.pd, make([]byte, 64<<10), rwAll)
	require.NoError(t, err)
	p.bm, err = db.RegMR(p.b.pd, make([]byte, 64<<10), rwAll)
	require.NoError(t, err)
	for i := range p.am.Bytes() {
		p.am.Bytes()[i] = byte(i * 7)
		p.bm.Bytes()[i] = byte(i * 13)
	}
	return p
}

// post sends one WRITE (a's bytes to b) or READ (b's bytes to a) of n bytes.
func (p *recoveryPair) post(t *testing.T, op qp.WROpcode, n int) {
	t.Helper()
	if op == qp.WRWrite {
		for i := range n {
			p.am.Bytes()[i] = byte(i*7 + int(p.sent))
		}
	}
	require.NoError(t, p.a.qp.PostSend(&qp.SendWR{Opcode: op, Flags: qp.SendSignaled,
		SGL:        []qp.SGE{{Addr: p.am.Addr(), Length: uint32(n), LKey: p.am.LKey()}},
		RemoteAddr: p.bm.Addr(), RKey: p.bm.RKey()}))
	p.sent += uint32((n + 1023) / 1024)
}

// nextPSN is the PSN of the requester's next packet.
func (p *recoveryPair) nextPSN() uint32 {
	return p.a.qp.Query().SQPSN + p.sent
}
