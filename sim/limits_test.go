package sim

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLargestStarRoutes: the largest topology a scenario may name (maxHosts
// hosts on one switch) builds and routes. Route did a scan of every pipe
// per visited node, so a 2,048-host star took 21.7 s and this one would
// have taken hours; it is one search per host over the graph now.
func TestLargestStarRoutes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 16,384 hosts: not with -short")
	}
	sc, err := Parse([]byte(`{"name": "star-max", "duration": "1ms", "host_count": 16384,
		"star": {"bandwidth": "10Gbps", "delay": "1us"},
		"workloads": [{"from": ["h16383"], "to": ["h0"], "count": 1, "size": {"fixed": 64}}]}`))
	require.NoError(t, err)
	r, err := Run(sc, 1)
	require.NoError(t, err)
	require.NotNil(t, r)
}

// TestScenarioProductLimits: fields each within their own limit but
// together beyond what a run can hold are refused with the product named,
// before anything is allocated; so are weights whose sum could overflow.
func TestScenarioProductLimits(t *testing.T) {
	for _, tc := range []struct {
		name, workloads, want string
		hosts                 int
	}{
		{"window x size", `{"from": ["h0"], "to": ["h1"], "window": 4096, "size": {"fixed": 16777216}}`,
			"QP pairs x window x largest message = 65536 MiB in flight", 2},
		{"pairs", `{"from": ["*"], "to": ["*"], "count": 1}`,
			"16777216 QP pairs (host pairs x qps;", 4096},
		{"pairs over workloads", `{"from": ["*"], "to": ["h0"], "qps": 30000, "count": 1}, {"from": ["h0"], "to": ["*"], "qps": 30000, "count": 1}`,
			"workload #1: 60000 QP pairs (host pairs x qps; 120000 in the scenario so far)", 2},
		{"operations", `{"from": ["*"], "to": ["h0"], "qps": 100, "count": 10000000}`,
			"QP pairs x count = 100000000000 operations", 100},
		{"weight", `{"from": ["h0"], "to": ["h1"], "ops": {"SEND": 9223372036854775807, "WRITE": 1}}`,
			"weight 9223372036854775807 for SEND outside 0..1048576", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(`{"name": "x", "duration": "1ms", "host_count": ` + strconv.Itoa(tc.hosts) +
				`, "star": {"bandwidth": "10Gbps"}, "workloads": [` + tc.workloads + `]}`))
			require.ErrorContains(t, err, tc.want)
		})
	}
}
