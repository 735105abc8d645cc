package sim

import (
	"fmt"

	"github.com/softroce/softroce/packet"
	"testing"

	"github.com/softroce/softroce/sim/netsim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runTampered runs a scenario with a hook that tampers with the run, and
// returns the verdicts by name.
func runTampered(t *testing.T, js string, tamper func(run *runState)) (*Result, map[string]Verdict) {
	t.Helper()
	afterSetup = tamper
	defer func() { afterSetup = nil }()
	res, err := Run(mustParse(t, js), 1)
	require.NoError(t, err)
	v := map[string]Verdict{}
	for _, x := range res.Verdicts {
		v[x.Name] = x
	}
	return res, v
}

const tamperBase = `{
	"name": "tamper", "duration": "1s", "host_count": 2,
	"links": [{"a": "h0", "b": "h1"}],
	"workloads": [{"from": ["h0"], "to": ["h1"], "ops": {%s}, "size": {"fixed": 512}, "count": 50, "window": 2}]
}`

func scen(ops string) string { return fmt.Sprintf(tamperBase, ops) }

// The invariants are not vacuous: each catches the misbehaviour it is for.
func TestInvariantsCatchTampering(t *testing.T) {
	t.Run("memory-model: remote memory changed behind the requester's back", func(t *testing.T) {
		_, v := runTampered(t, scen(`"WRITE": 1, "READ": 1`), func(run *runState) {
			f := run.flows[0]
			run.w.loop.At(20*netsim.Microsecond, func() { f.remote.Bytes()[100] ^= 0xFF })
		})
		assert.False(t, v[invModel].OK)
		assert.True(t, v[invIntegrity].OK)
	})
	t.Run("integrity: payload corrupted with a valid ICRC", func(t *testing.T) {
		_, v := runTampered(t, scen(`"SEND": 1`), func(run *runState) {
			h := run.hosts[0].h
			h.dev = &forger{Device: h.dev, nth: 5}
		})
		assert.False(t, v[invIntegrity].OK)
		assert.True(t, v[invCorruption].OK, "the network did not corrupt it")
	})
	t.Run("liveness: the run ends before the work", func(t *testing.T) {
		js := `{"name": "short", "duration": "20us", "host_count": 2, "links": [{"a": "h0", "b": "h1"}],
			"workloads": [{"from": ["h0"], "to": ["h1"], "size": {"fixed": 4096}, "count": 1000}]}`
		res, v := runTampered(t, js, nil)
		assert.False(t, v[invLiveness].OK)
		assert.Positive(t, res.Unfinished+uint64(1000)-res.Posted)
	})
	t.Run("liveness: drain bound after the last heal", func(t *testing.T) {
		js := `{"name": "drain", "duration": "1s", "drain": "1us", "host_count": 2, "links": [{"a": "h0", "b": "h1"}],
			"partitions": [{"link": "h0-h1", "start": "10us", "heal": "100us"}],
			"workloads": [{"from": ["h0"], "to": ["h1"], "size": {"fixed": 1024}, "count": 20, "timeout": 14}]}`
		_, v := runTampered(t, js, nil)
		// Recovery needs at least a round trip after the heal (an early
		// retry, or the 67ms ACK timeout): longer than the 1us bound.
		assert.False(t, v[invLiveness].OK)
		assert.Contains(t, v[invLiveness].Details[0], "after the last fault healed")
	})
	t.Run("status: a failure the scenario does not allow", func(t *testing.T) {
		js := `{"name": "cut", "duration": "1s", "host_count": 2, "links": [{"a": "h0", "b": "h1"}],
			"partitions": [{"link": "h0-h1", "start": "10us"}],
			"workloads": [{"from": ["h0"], "to": ["h1"], "size": {"fixed": 1024}, "count": 20, "timeout": 4, "retry_cnt": 1}]}`
		res, v := runTampered(t, js, nil)
		assert.False(t, v[invStatus].OK)
		assert.Equal(t, uint64(1), res.ByStatus["RETRY_EXC_ERR"])
		assert.True(t, v[invLiveness].OK, "a failed QP is finished work")
		assert.True(t, v[invCompletion].OK, "the rest is flushed, in order")
	})
	t.Run("corruption: a device that ignores the ICRC", func(t *testing.T) {
		js := `{"name": "icrc", "duration": "1s", "host_count": 2,
			"links": [{"a": "h0", "b": "h1", "fault": "corrupt=5%"}],
			"workloads": [{"from": ["h0"], "to": ["h1"], "size": {"fixed": 512}, "count": 100, "window": 4}]}`
		_, v := runTampered(t, js, func(run *runState) {
			h := run.hosts[1].h
			h.dev = &icrcIgnorer{Device: h.dev}
		})
		assert.False(t, v[invCorruption].OK)
	})
	t.Run("counters: a frame the trace does not know", func(t *testing.T) {
		_, v := runTampered(t, scen(`"SEND": 1`), func(run *runState) {
			run.w.loop.At(5*netsim.Microsecond, func() { run.hosts[1].h.frames++ })
		})
		assert.False(t, v[invCounters].OK)
	})
	t.Run("coverage: a fault that never fired", func(t *testing.T) {
		js := `{"name": "cov", "duration": "1s", "host_count": 2, "links": [{"a": "h0", "b": "h1"}],
			"workloads": [{"from": ["h0"], "to": ["h1"], "size": {"fixed": 64}, "count": 5}],
			"expect": {"sometimes": ["retransmit", "rnr"]}}`
		_, v := runTampered(t, js, nil)
		assert.False(t, v[invCoverage].OK)
		assert.Equal(t, 2, v[invCoverage].Violations)
	})
}

// forger is a device whose nth frame leaves with a payload byte changed and
// the ICRC recomputed, so that the receiver accepts it: only the end-to-end
// payload check can notice.
type forger struct {
	Device
	nth, n int
}

func (f *forger) Output(now netsim.Time, maxN int, emit func([]byte)) (int, bool) {
	return f.Device.Output(now, maxN, func(b []byte) {
		f.n++
		if f.n == f.nth {
			var fr packet.Frame
			if packet.ParseFrame(b, &fr) == nil && len(fr.Transport) > 12+4+8 {
				fr.Transport[len(fr.Transport)-5] ^= 0x40
				packet.SetICRC(fr.IPUDP(), fr.Transport)
			}
		}
		emit(b)
	})
}

// icrcIgnorer stands for a device that does not check the ICRC: it repairs
// the ICRC of each frame before its real device sees it.
type icrcIgnorer struct{ Device }

func (d *icrcIgnorer) HandleFrame(now netsim.Time, frame []byte, intact bool) {
	var fr packet.Frame
	if packet.ParseFrame(frame, &fr) == nil && !fr.ICRCOK() {
		packet.SetICRC(fr.IPUDP(), fr.Transport)
	}
	d.Device.HandleFrame(now, frame, intact)
}
