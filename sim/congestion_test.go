package sim

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/internal/testenv"
	"github.com/softroce/softroce/sim/netsim"
)

func verdict(res *Result, name string) Verdict {
	for _, v := range res.Verdicts {
		if v.Name == name {
			return v
		}
	}
	return Verdict{}
}

// TestDCQCNConvergenceNeedsDCQCN: the reference experiment's checks fail
// when the hosts run no congestion control (the queue grows to what the
// RC windows allow), so they measure DCQCN, not the workload.
func TestDCQCNConvergenceNeedsDCQCN(t *testing.T) {
	sc, err := Load("../testdata/scenarios/dcqcn-convergence.json")
	require.NoError(t, err)
	sc.Congestion = nil
	sc.Expect.Sometimes = nil
	res, err := Run(sc, 1)
	require.NoError(t, err)
	v := verdict(res, invCongestion)
	assert.False(t, v.OK)
	assert.Contains(t, v.Details[0], "queue sw0->h0 reached")
	assert.Zero(t, res.Devices["h0"]["np_cnp_sent"])
	assert.Zero(t, res.Network.ECNMarked, "nothing is ECN-capable: nothing marked")
}

// TestReportSamplesWithoutChangingTheRun: asking for a report leaves the
// run itself (its event log) as it was, and the report's series add up to
// what the run moved.
func TestReportSamplesWithoutChangingTheRun(t *testing.T) {
	sc, err := Load("../testdata/scenarios/dcqcn-convergence.json")
	require.NoError(t, err)
	sc.Expect.Fair, sc.Expect.Queues = nil, nil
	plain, err := Run(sc, 3)
	require.NoError(t, err)
	assert.Nil(t, plain.Report)
	rep, err := RunWith(sc, 3, Options{Report: 250_000})
	require.NoError(t, err)
	assert.Equal(t, plain.EventLog, rep.EventLog)
	r := rep.Report
	require.NotNil(t, r)
	require.Len(t, r.Flows, 4)
	var bytes uint64
	for _, f := range r.Flows {
		assert.Len(t, f.Sent, r.Samples)
		assert.Len(t, f.Rate, r.Samples)
		var done float64
		for _, x := range f.Throughput {
			done += x * float64(r.Interval) / 8e9
		}
		assert.InDelta(t, float64(f.Bytes), done, 1, f.Name)
		bytes += f.Bytes
		assert.GreaterOrEqual(t, f.Start, int64(0))
		assert.Greater(t, f.End, f.Start)
	}
	assert.Equal(t, rep.Bytes, bytes)
	// Some flow was rate limited at some sample.
	limited := false
	for _, f := range r.Flows {
		for _, x := range f.Rate {
			limited = limited || (x > 0 && x < 100_000_000_000)
		}
	}
	assert.True(t, limited)
}

func TestJain(t *testing.T) {
	assert.InDelta(t, 1, Jain([]float64{3, 3, 3}), 1e-12)
	assert.InDelta(t, 0.25, Jain([]float64{0, 0, 0, 5}), 1e-12)
	assert.InDelta(t, 1, Jain(nil), 1e-12)
}

// TestCongestionCaptureInTshark has tshark, an independent dissector, read
// a DCQCN run's capture: CE-marked data (DSCP 0, ECN CE), and CNPs as
// ConnectX sends them, 74 bytes, DSCP CS6 (48), Not-ECT, opcode 129 (which
// tshark calls unknown), BECN (tshark's "Reserved: 40"), sent to the data
// sender's QP.
func TestCongestionCaptureInTshark(t *testing.T) {
	testenv.Tools(t, "apt-get install tshark", "tshark")
	sc, err := Load("../testdata/scenarios/dcqcn-convergence.json")
	require.NoError(t, err)
	sc.Workloads = sc.Workloads[:2]
	sc.Workloads[0].Count, sc.Workloads[1].Count = 4, 4
	sc.Workloads[1].Start = 0
	res, path := runCaptured(t, sc)
	cnps := res.Devices["h0"]["np_cnp_sent"]
	require.Positive(t, cnps)

	out, err := exec.Command("tshark", "-r", path, "-T", "fields", "-E", "separator=,",
		"-e", "frame.len", "-e", "ip.dsfield.dscp", "-e", "ip.dsfield.ecn", "-e", "infiniband.bth.opcode",
		"-e", "infiniband.reserved", "-e", "infiniband.bth.destqp", "-e", "ip.src",
		"-Y", "infiniband.bth.opcode == 129").Output()
	require.NoError(t, err)
	lines := strings.Fields(string(out))
	// Each CNP is in the capture twice: on h0's link and on the sender's.
	require.Len(t, lines, 2*int(cnps))
	for _, l := range lines {
		f := strings.Split(l, ",")
		require.Len(t, f, 7, l)
		assert.Equal(t, []string{"74", "48", "0", "129", "40"}, f[:5], l)
		assert.Equal(t, "10.0.0.1", f[6], "CNPs come from the receiver h0")
	}
	out, err = exec.Command("tshark", "-r", path, "-T", "fields", "-e", "ip.dsfield.ecn",
		"-Y", "infiniband.bth.opcode == 7").Output() // RDMA WRITE MIDDLE
	require.NoError(t, err)
	ecn := map[string]int{}
	for _, v := range strings.Fields(string(out)) {
		ecn[v]++
	}
	assert.Positive(t, ecn["2"], "sent ECT(0)")
	assert.Positive(t, ecn["3"], "marked CE on the way")
	assert.Zero(t, ecn["0"], "no data packet is Not-ECT")
}

// TestPFCVictimNeedsPFC: the victim experiment's checks fail without PFC
// (the victim runs free and r's queue grows), so they measure PFC.
func TestPFCVictimNeedsPFC(t *testing.T) {
	sc, err := Load("../testdata/scenarios/pfc-victim.json")
	require.NoError(t, err)
	for i := range sc.Switches {
		sc.Switches[i].PFC = nil
	}
	sc.Expect.Sometimes = nil
	res, err := Run(sc, 1)
	require.NoError(t, err)
	v := verdict(res, invCongestion)
	require.False(t, v.OK)
	assert.Equal(t, 2, v.Violations, v.Details)
	assert.Nil(t, res.PFC)
}

// pauseCounts sums the PAUSE (XOFF) and XON frames every switch of a run
// sent.
func pauseCounts(res *Result) (xoff, xon uint64) {
	for _, c := range res.PFC {
		xoff += c.XOffSent
		xon += c.XOnSent
	}
	return xoff, xon
}

// TestPFCCaptureInTshark: the PAUSE frames in a PFC run's capture are what
// tshark decodes as 802.1Qbb: MAC control, opcode 0x0101, class 3 enabled,
// and every PAUSE has its XON.
func TestPFCCaptureInTshark(t *testing.T) {
	testenv.Tools(t, "apt-get install tshark", "tshark")
	sc, err := Load("../testdata/scenarios/pfc-victim.json")
	require.NoError(t, err)
	sc.Workloads[0].Count, sc.Workloads[1].Count = 4, 4
	res, path := runCaptured(t, sc)
	xoff, xon := pauseCounts(res)
	require.Positive(t, xoff)
	out, err := exec.Command("tshark", "-r", path, "-T", "fields", "-E", "separator=,",
		"-e", "frame.len", "-e", "eth.type", "-e", "macc.opcode", "-e", "macc.cbfc.enbv", "-Y", "macc").Output()
	require.NoError(t, err)
	lines := strings.Fields(string(out))
	assert.Len(t, lines, int(xoff+xon), "every PAUSE and XON in the capture")
	for _, l := range lines {
		assert.Equal(t, "60,0x8808,0x0101,0x0008", l)
	}
}

// TestPFCPrioritiesNeedPerPriorityPause: pfc-priorities' victim check
// fails with one lossless class (the victim is paused with the incast, 20.7
// Gb/s), so it measures pausing priorities apart.
func TestPFCPrioritiesNeedPerPriorityPause(t *testing.T) {
	sc, err := Load("../testdata/scenarios/pfc-priorities.json")
	require.NoError(t, err)
	for i := range sc.Switches {
		sc.Switches[i].PFC.Priorities = nil
	}
	res, err := Run(sc, 1)
	require.NoError(t, err)
	v := verdict(res, invCongestion)
	require.False(t, v.OK)
	assert.Equal(t, 1, v.Violations, v.Details)
	assert.Contains(t, v.Details[0], "victim")
}

// TestPFCPrioritiesInTshark: with priorities 3 and 4 lossless, each PAUSE in
// the capture names one class, with its pause time in that class's field,
// as tshark decodes 802.1Qbb; both classes are paused (the victim's frames
// wait behind the incast's in s1's port, so b's ingress passes XOFF too),
// and the data carries the workloads' DSCPs.
func TestPFCPrioritiesInTshark(t *testing.T) {
	testenv.Tools(t, "apt-get install tshark", "tshark")
	sc, err := Load("../testdata/scenarios/pfc-priorities.json")
	require.NoError(t, err)
	sc.Workloads[0].Count, sc.Workloads[1].Count = 6, 12
	res, path := runCaptured(t, sc)
	xoff, xon := pauseCounts(res)
	require.Positive(t, xoff)
	out, err := exec.Command("tshark", "-r", path, "-T", "fields", "-E", "separator=,", "-e", "macc.cbfc.enbv",
		"-e", "macc.cbfc.pause_time.c3", "-e", "macc.cbfc.pause_time.c4", "-Y", "macc").Output()
	require.NoError(t, err)
	lines := strings.Fields(string(out))
	assert.Len(t, lines, int(xoff+xon), "every PAUSE and XON in the capture")
	byClass := map[string]int{}
	for _, l := range lines {
		f := strings.Split(l, ",")
		require.Len(t, f, 3, l)
		switch f[0] {
		case "0x0008":
			assert.Equal(t, "0", f[2], "a class 3 PAUSE leaves class 4 alone: %s", l)
		case "0x0010":
			assert.Equal(t, "0", f[1], "a class 4 PAUSE leaves class 3 alone: %s", l)
		default:
			t.Errorf("PAUSE for classes %s: want 3 or 4 alone", f[0])
		}
		byClass[f[0]]++
	}
	assert.Positive(t, byClass["0x0008"])
	assert.Positive(t, byClass["0x0010"])
	out, err = exec.Command("tshark", "-r", path, "-T", "fields", "-e", "ip.dsfield.dscp", "-Y", "udp.dstport==4791").Output()
	require.NoError(t, err)
	dscps := map[string]bool{}
	for _, d := range strings.Fields(string(out)) {
		dscps[d] = true
	}
	assert.Equal(t, map[string]bool{"26": true, "34": true}, dscps, "RoCE frames carry the workloads' DSCPs (ACKs too)")
}

// TestIncastDCQCNNeedsTheRateCuts: incast-dcqcn-pfc drops nothing and
// resends nothing, and its queue check measures DCQCN: it fails with
// mlx5's 32767-byte counter (rates recover between CNPs and PFC holds the
// queue at its cap) and without congestion control.
func TestIncastDCQCNNeedsTheRateCuts(t *testing.T) {
	sc, err := Load("../testdata/scenarios/incast-dcqcn-pfc.json")
	require.NoError(t, err)
	res, err := Run(sc, 1)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Failures())
	assert.Zero(t, res.Network.DropQueue)
	assert.Zero(t, res.Retransmits)
	for _, change := range []func(*Scenario){
		func(sc *Scenario) { sc.Congestion.Params = nil },
		func(sc *Scenario) { sc.Congestion = nil; sc.Expect.Sometimes = []string{"pfc_pause"} },
	} {
		sc, err := Load("../testdata/scenarios/incast-dcqcn-pfc.json")
		require.NoError(t, err)
		change(sc)
		res, err := Run(sc, 1)
		require.NoError(t, err)
		v := verdict(res, invCongestion)
		require.False(t, v.OK)
		assert.Contains(t, strings.Join(v.Details, "\n"), "queue sw0->h0 held")
	}
}

// TestPFCStormNeedsTheWatchdog: without the watchdog the storm's pause
// keeps the victim stopped after the moment the watchdog would have freed
// it, and the check of that window fails.
func TestPFCStormNeedsTheWatchdog(t *testing.T) {
	sc, err := Load("../testdata/scenarios/pfc-storm.json")
	require.NoError(t, err)
	pfc := *sc.Star.PFC
	pfc.WatchdogDetect, pfc.WatchdogRestore = 0, 0
	sc.Star.PFC = &pfc
	sc.Expect.Sometimes = nil
	res, err := Run(sc, 1)
	require.NoError(t, err)
	v := verdict(res, invCongestion)
	require.False(t, v.OK)
	require.Len(t, v.Details, 1)
	assert.Contains(t, v.Details[0], "0.002500000s..0.005000000s")
	assert.Zero(t, res.PFC["sw0"].Storms)
}

// TestPFCDeadlockIsAViolation: a deadlock the scenario does not expect
// fails the congestion invariant, naming its cycle; without the watchdog
// the ring never recovers: its QPs exhaust their retries, and the status
// invariant fails too.
func TestPFCDeadlockIsAViolation(t *testing.T) {
	sc, err := Load("../testdata/scenarios/pfc-deadlock.json")
	require.NoError(t, err)
	sc.Expect.Sometimes = nil
	for i := range sc.Switches {
		p := *sc.Switches[i].PFC
		p.WatchdogDetect, p.WatchdogRestore = 0, 0
		sc.Switches[i].PFC = &p
	}
	sc.Duration = Duration(50 * 1e6)
	res, err := Run(sc, 1)
	require.NoError(t, err)
	require.Len(t, res.Deadlocks, 1)
	assert.Equal(t, []string{"s0->s1", "s1->s2", "s2->s3", "s3->s4", "s4->s0"}, res.Deadlocks[0].Cycle)
	v := verdict(res, invCongestion)
	require.False(t, v.OK)
	assert.Contains(t, v.Details[0], "PFC deadlock: s0->s1 s1->s2")
	assert.False(t, verdict(res, invStatus).OK)
	assert.Positive(t, res.ByStatus["RETRY_EXC_ERR"])
}

// runCaptured runs sc (expecting nothing beyond the invariants) with seed
// 1, writing a capture, and returns the result and the capture's path.
func runCaptured(t *testing.T, sc *Scenario) (*Result, string) {
	t.Helper()
	sc.Expect = ExpectSpec{}
	path := filepath.Join(t.TempDir(), "run.pcapng")
	f, err := os.Create(path)
	require.NoError(t, err)
	res, err := RunWith(sc, 1, Options{Pcap: f})
	require.NoError(t, err)
	require.NoError(t, f.Close())
	require.True(t, res.OK(), res.Failures())
	return res, path
}

// TestSummaryNamesCongestion: the text summary has a congestion line when
// there was ECN, DCQCN or PFC activity, and none otherwise.
func TestSummaryNamesCongestion(t *testing.T) {
	r := &Result{}
	assert.NotContains(t, r.Summary(), "congestion:")
	r.Network.ECNMarked = 5
	r.Devices = map[string]map[string]uint64{"h0": {"np_cnp_sent": 3}, "h1": {"rp_cnp_handled": 3}}
	assert.Contains(t, r.Summary(), "congestion: 5 ECN-marked, 3 CNPs sent, 3 handled\n")
	r.PFC = map[string]netsim.PFCCounters{"s0": {XOffSent: 2, XOnSent: 1, Storms: 1, DropWatchdog: 9}}
	r.Deadlocks = []Deadlock{{}}
	assert.Contains(t, r.Summary(), "; PFC 2 XOFF 1 XON, 0 headroom drops, 1 storms (9 dropped), 1 deadlocks\n")
}
