package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func mustParse(t *testing.T, js string) *Scenario {
	t.Helper()
	sc, err := Parse([]byte(js))
	require.NoError(t, err)
	return sc
}

func TestRunCleanRC(t *testing.T) {
	sc := mustParse(t, `{
		"name": "clean-rc", "duration": "100ms", "host_count": 2,
		"links": [{"a": "h0", "b": "h1"}],
		"workloads": [{"from": ["h0"], "to": ["h1"], "ops": {"SEND": 2, "SEND_IMM": 1, "WRITE": 2, "WRITE_IMM": 1, "READ": 2, "CAS": 1, "FADD": 1},
		               "size": {"min": 0, "max": 5000}, "count": 200, "window": 4}]
	}`)
	res, err := Run(sc, 1)
	require.NoError(t, err)
	t.Log(res.Summary())
	require.True(t, res.OK(), res.Failures())
	assert.Equal(t, uint64(200), res.Posted)
	assert.Equal(t, uint64(200), res.ByStatus["SUCCESS"])
	assert.Zero(t, res.Unfinished)
	assert.Positive(t, res.Bytes)
	assert.Zero(t, res.Retransmits)
}

func TestRunFaultyRC(t *testing.T) {
	sc := mustParse(t, `{
		"name": "faulty-rc", "duration": "10s", "host_count": 2,
		"links": [{"a": "h0", "b": "h1", "fault": "loss=3%,dup=2%,reorder=3%,reorder_delay=20us,corrupt=1%,bits=3"}],
		"workloads": [{"from": ["h0"], "to": ["h1"], "qps": 2, "ops": {"SEND": 2, "SEND_IMM": 1, "WRITE": 2, "WRITE_IMM": 1, "READ": 2, "CAS": 1, "FADD": 1},
		               "size": {"min": 0, "max": 5000}, "count": 300, "window": 8, "timeout": 8}]
	}`)
	res, err := Run(sc, 3)
	require.NoError(t, err)
	t.Log(res.Summary())
	require.True(t, res.OK(), res.Failures())
	assert.Equal(t, uint64(600), res.ByStatus["SUCCESS"])
	assert.Positive(t, res.Retransmits)
	assert.Positive(t, res.Network.Corrupted)
}

func TestRunIPv6Switched(t *testing.T) {
	sc := mustParse(t, `{
		"name": "ipv6", "duration": "10s", "mtu": 9000,
		"hosts": [{"name": "a", "ip": "fd00::1"}, {"name": "b", "ip": "fd00::2"}, {"name": "c", "ip": "fd00::3"}],
		"switches": [{"name": "s1"}, {"name": "s2", "latency": "1us"}],
		"links": [{"a": "a", "b": "s1"}, {"a": "s1", "b": "s2", "bandwidth": "40Gbps", "fault": "loss=1%"}, {"a": "b", "b": "s2"}, {"a": "c", "b": "s2"}],
		"workloads": [
			{"from": ["a"], "to": ["b", "c"], "ops": {"SEND": 1, "WRITE": 1, "READ": 1, "CAS": 1}, "size": {"max": 20000}, "count": 100, "window": 4, "timeout": 8},
			{"from": ["c"], "to": ["a"], "transport": "UD", "size": {"fixed": 4096}, "count": 50}
		]
	}`)
	res, err := Run(sc, 2)
	require.NoError(t, err)
	require.True(t, res.OK(), res.Failures())
	assert.Equal(t, uint64(250), res.Posted)
	assert.Equal(t, uint64(200), res.ByStatus["SUCCESS"]-50)
	assert.Positive(t, res.Retransmits, "the inter-switch link loses frames")
	for _, l := range res.Links {
		if l.Name == "s1->s2" {
			assert.Positive(t, l.DropLoss)
		}
	}
}

// The responder posts receives only for workloads whose operations consume
// them; either way every operation completes and every check holds.
func TestReceivesOnlyWhereConsumed(t *testing.T) {
	for _, tc := range []struct {
		ops      string
		receives bool
	}{
		{`"SEND": 1`, true},
		{`"SEND_IMM": 1`, true},
		{`"WRITE_IMM": 1`, true},
		{`"WRITE": 1, "WRITE_IMM": 1`, true},
		{`"WRITE": 1`, false},
		{`"READ": 1`, false},
		{`"CAS": 1, "FADD": 1`, false},
		{`"WRITE": 2, "READ": 1, "FADD": 1`, false},
	} {
		t.Run(tc.ops, func(t *testing.T) {
			posted, registered := -1, false
			res, _ := runTampered(t, scen(tc.ops), func(run *runState) {
				_, posted = run.flows[0].qb.Outstanding()
				registered = run.flows[0].recv != nil
			})
			require.True(t, res.OK(), res.Failures())
			assert.Equal(t, uint64(50), res.ByStatus["SUCCESS"])
			assert.Equal(t, tc.receives, registered, "a receive region")
			if tc.receives {
				assert.Equal(t, 3, posted, "window 2: three receives posted")
			} else {
				assert.Zero(t, posted)
			}
		})
	}
}
