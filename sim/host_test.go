package sim

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"testing"

	"github.com/softroce/softroce/pcapio"
	"github.com/softroce/softroce/sim/netsim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// echoDev is a test device: a pinger sends a numbered frame to its peer
// every period until it has sent count (a timer drives it through
// Deadline/Tick); every device echoes frames that are not replies back to
// the sender with the addresses swapped.
type echoDev struct {
	info    hostInfo
	peer    *hostInfo
	period  netsim.Time
	count   int
	sent    int
	next    netsim.Time
	pending [][]byte
	replies []uint32
	echoed  int
}

func (d *echoDev) frame(dstMAC [6]byte, seq uint32, reply bool) []byte {
	f := make([]byte, 100)
	copy(f, dstMAC[:])
	copy(f[6:], d.info.MAC[:])
	f[12], f[13] = 0x08, 0x00
	f[14] = 0x45
	f[23] = 17
	copy(f[26:], d.info.IP.AsSlice())
	if d.peer != nil {
		copy(f[30:], d.peer.IP.AsSlice())
	}
	binary.BigEndian.PutUint32(f[60:], seq)
	if reply {
		f[64] = 1
	}
	return f
}

func (d *echoDev) HandleFrame(_ netsim.Time, f []byte, _ bool) {
	if f[64] == 1 {
		d.replies = append(d.replies, binary.BigEndian.Uint32(f[60:]))
		return
	}
	r := append([]byte(nil), f...)
	copy(r, f[6:12])
	copy(r[6:], d.info.MAC[:])
	copy(r[26:], f[30:34])
	copy(r[30:], f[26:30])
	r[64] = 1
	d.pending = append(d.pending, r)
	d.echoed++
}

func (d *echoDev) Output(_ netsim.Time, maxN int, emit func([]byte)) (int, bool) {
	n := 0
	for n < maxN && len(d.pending) > 0 {
		emit(d.pending[0])
		d.pending = d.pending[1:]
		n++
	}
	return n, len(d.pending) > 0
}

func (d *echoDev) Tick(now netsim.Time) {
	for d.peer != nil && d.sent < d.count && d.next <= now {
		d.pending = append(d.pending, d.frame(d.peer.MAC, uint32(d.sent), false))
		d.sent++
		d.next += d.period
	}
}

func (d *echoDev) Deadline() netsim.Time {
	if d.peer == nil || d.sent >= d.count {
		return netsim.Never
	}
	return d.next
}

func echoWorld(t *testing.T, sc *Scenario, seed uint64, count int) (*world, []*echoDev, *bytes.Buffer, *bytes.Buffer) {
	t.Helper()
	var devs []*echoDev
	var log, pcap bytes.Buffer
	pw, err := pcapio.NewWriter(&pcap)
	require.NoError(t, err)
	infos, err := resolveHosts(sc)
	require.NoError(t, err)
	w, err := build(sc, seed, func(h hostInfo, _ uint64) (Device, error) {
		d := &echoDev{info: h, period: 2 * netsim.Microsecond, count: count}
		if h.Index == 0 {
			d.peer = &infos[len(infos)-1]
		}
		devs = append(devs, d)
		return d, nil
	}, func(l *netsim.Loop) *recorder { return newRecorder(l, &log, pw) })
	require.NoError(t, err)
	for _, h := range w.hosts {
		h.arm()
	}
	w.loop.RunUntil(netsim.Time(sc.Duration))
	w.rec.close()
	require.NoError(t, pw.Close())
	require.NoError(t, w.rec.err)
	return w, devs, &log, &pcap
}

func TestEchoOverSwitchWithFaults(t *testing.T) {
	sc, err := Parse([]byte(`{
		"name": "echo",
		"duration": "10ms",
		"host_count": 3,
		"star": {"bandwidth": "1Gbps", "delay": "2us", "latency": "300ns"},
		"faults": [{"link": "h2-sw0", "spec": "loss=10%,dup=5%,reorder=5%", "from": "100us", "until": "1ms"}],
		"partitions": [{"link": "h0->sw0", "start": "1.2ms", "heal": "1.4ms"}],
		"workloads": []
	}`))
	require.NoError(t, err)
	const count = 1000
	w, devs, log, pcap := echoWorld(t, sc, 1, count)
	ping, echo := devs[0], devs[2]
	assert.Equal(t, count, ping.sent)
	assert.Zero(t, devs[1].echoed, "h1 gets nothing: the switch forwards by MAC")
	// Before faults: every reply. During: some lost, some twice.
	var before, dups int
	seen := map[uint32]int{}
	for _, s := range ping.replies {
		seen[s]++
		if seen[s] == 2 {
			dups++
		}
		if s < 40 {
			before++
		}
	}
	assert.Equal(t, 40, before, "frames sent before the faults start all come back")
	assert.Positive(t, dups)
	missing := 0
	for s := uint32(0); s < count; s++ {
		if seen[s] == 0 {
			missing++
		}
	}
	// The partition (200us of 2us pings) and 10% loss each way take some.
	assert.Greater(t, missing, 100)
	assert.Less(t, missing, 400)
	cut := w.net.Pipe("h0->sw0").Counters().DropPartition
	assert.InDelta(t, 100, float64(cut), 2)
	tot := w.net.Totals()
	assert.Equal(t, tot.Sent+tot.Duplicated, tot.Delivered+tot.Dropped())
	assert.Positive(t, echo.echoed)
	assert.Contains(t, log.String(), "cut h0->sw0")
	assert.Contains(t, log.String(), " drop=partition")
	assert.Positive(t, pcap.Len())
}

func TestEchoDeterministic(t *testing.T) {
	sc, err := Parse([]byte(`{
		"name": "echo", "duration": "5ms", "host_count": 2,
		"links": [{"a": "h0", "b": "h1", "bandwidth": "100Mbps", "delay": "5us", "queue": "4KiB",
		           "fault": "loss=5%,dup=2%,reorder=5%,corrupt=2%,jitter=1us,burst=gilbert:p=1%:r=30%"}],
		"workloads": []
	}`))
	require.NoError(t, err)
	_, _, logA, pcapA := echoWorld(t, sc, 42, 2000)
	_, _, logB, pcapB := echoWorld(t, sc, 42, 2000)
	_, _, logC, pcapC := echoWorld(t, sc, 43, 2000)
	require.Greater(t, logA.Len(), 1000)
	assert.Equal(t, sha256.Sum256(logA.Bytes()), sha256.Sum256(logB.Bytes()))
	assert.Equal(t, sha256.Sum256(pcapA.Bytes()), sha256.Sum256(pcapB.Bytes()))
	assert.NotEqual(t, sha256.Sum256(logA.Bytes()), sha256.Sum256(logC.Bytes()))
	assert.NotEqual(t, sha256.Sum256(pcapA.Bytes()), sha256.Sum256(pcapC.Bytes()))
	// The queue is small and the link slow: some frames drop at the queue.
	assert.Contains(t, logA.String(), "drop=queue")
}
