package sim

// Tests that run only when asked, through environment variables: a longer
// fuzzing campaign and a verbose replay of one seed.

import (
	"os"
	"strconv"
	"testing"
)

// TestFuzzCampaign runs SIM_FUZZ seeds (from SIM_FROM, default 1): a longer
// campaign than TestFuzz, on demand.
func TestFuzzCampaign(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("SIM_FUZZ"))
	if n == 0 {
		t.Skip("SIM_FUZZ not set")
	}
	from, _ := strconv.ParseUint(os.Getenv("SIM_FROM"), 10, 64)
	from = max(from, 1)
	status := map[string]uint64{}
	ops := map[string]uint64{}
	var retrans, rnr, seqnak uint64
	rep := FuzzWith(n, from, 2, func(_ uint64, res *Result, err error) {
		if err != nil {
			return
		}
		for k, v := range res.ByStatus {
			status[k] += v
		}
		for k, v := range res.ByOp {
			ops[k] += v
		}
		retrans += res.Retransmits
		rnr += res.RNRNaksRcvd
		seqnak += res.NAKs["PSN_SEQ_ERR"]
	})
	t.Logf("statuses %v\nops %v\nretransmits %d, RNR NAKs %d, sequence NAKs %d", status, ops, retrans, rnr, seqnak)
	t.Logf("%d runs, %d events, %d frames, %d failures", rep.Runs, rep.Events, rep.Frames, len(rep.Failures))
	for _, f := range rep.Failures {
		t.Errorf("seed %d (%s):\n%s%s", f.Seed, f.Command, f.Error, f.Failures)
	}
}

// TestDebugSeed runs one fuzz seed verbosely: SIM_SEED=N go test -run TestDebugSeed -v
func TestDebugSeed(t *testing.T) {
	s := os.Getenv("SIM_SEED")
	if s == "" {
		t.Skip("SIM_SEED not set")
	}
	seed, _ := strconv.ParseUint(s, 10, 64)
	sc := Generate(seed)
	js, _ := MarshalScenario(sc)
	t.Logf("%s", js)
	opt := Options{}
	if p := os.Getenv("SIM_LOG"); p != "" {
		f, _ := os.Create(p)
		defer f.Close()
		opt.Log = f
	}
	res, err := RunWith(sc, seed, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(res.Summary())
	if !res.OK() {
		t.Errorf("seed %d:\n%s", seed, res.Failures())
	}
}
