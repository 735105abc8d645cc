package sim

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUnits(t *testing.T) {
	tests := []struct {
		in   string
		dur  int64
		bw   int64
		size int64
		err  bool
	}{
		{in: `"1.5ms"`, dur: 1_500_000},
		{in: `1000`, dur: 1000, bw: 1000, size: 1000},
		{in: `"10Gbps"`, bw: 10_000_000_000},
		{in: `"2.5Gbps"`, bw: 2_500_000_000},
		{in: `"800kbps"`, bw: 800_000},
		{in: `"64KiB"`, size: 65536},
		{in: `"1MB"`, size: 1_000_000},
		{in: `"1500B"`, size: 1500},
		{in: `"-1ms"`, err: true},
		{in: `-5`, err: true},
		{in: `"fast"`, err: true},
		{in: `true`, err: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			var d Duration
			var bw Bandwidth
			var bs ByteSize
			derr := json.Unmarshal([]byte(tc.in), &d)
			berr := json.Unmarshal([]byte(tc.in), &bw)
			serr := json.Unmarshal([]byte(tc.in), &bs)
			if tc.err {
				assert.Error(t, derr)
				assert.Error(t, berr)
				assert.Error(t, serr)
				return
			}
			if tc.dur != 0 {
				require.NoError(t, derr)
				assert.Equal(t, tc.dur, int64(d))
			}
			if tc.bw != 0 {
				require.NoError(t, berr)
				assert.Equal(t, tc.bw, int64(bw))
			}
			if tc.size != 0 {
				require.NoError(t, serr)
				assert.Equal(t, tc.size, int64(bs))
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	tests := map[string]string{
		"unknown field":     `{"name": "x", "workloads": [], "hosts_count": 2}`,
		"unknown transport": `{"name": "x", "workloads": [{"from": ["*"], "to": ["*"], "transport": "XRC"}]}`,
		"unknown op":        `{"name": "x", "workloads": [{"from": ["*"], "to": ["*"], "ops": {"FLUSH": 1}}]}`,
		"READ on UC":        `{"name": "x", "workloads": [{"from": ["*"], "to": ["*"], "transport": "UC", "ops": {"READ": 1}}]}`,
		"WRITE on UD":       `{"name": "x", "workloads": [{"from": ["*"], "to": ["*"], "transport": "UD", "ops": {"WRITE": 1}}]}`,
		"no from":           `{"name": "x", "workloads": [{"to": ["*"]}]}`,
		"negative count":    `{"name": "x", "workloads": [{"from": ["*"], "to": ["*"], "count": -1}]}`,
		"bad size range":    `{"name": "x", "workloads": [{"from": ["*"], "to": ["*"], "size": {"min": 9, "max": 3}}]}`,
		"bad fault":         `{"name": "x", "workloads": [], "faults": [{"link": "*", "spec": "loss=200%"}]}`,
		"heal before start": `{"name": "x", "workloads": [], "partitions": [{"link": "*", "start": "2ms", "heal": "1ms"}]}`,
		"bad coverage":      `{"name": "x", "workloads": [], "expect": {"sometimes": ["magic"]}}`,
		"bad status":        `{"name": "x", "workloads": [], "expect": {"statuses": ["FINE"]}}`,
		"timeout too big":   `{"name": "x", "workloads": [{"from": ["*"], "to": ["*"], "timeout": 32}]}`,
		"not an IB MTU":     `{"name": "x", "workloads": [{"from": ["*"], "to": ["*"], "mtu": 1500}]}`,
		"huge count":        `{"name": "x", "workloads": [{"from": ["*"], "to": ["*"], "count": 1000000000}]}`,
		"bad ip":            `{"name": "x", "workloads": [], "hosts": [{"name": "a", "ip": "10.0.0"}]}`,
	}
	for name, js := range tests {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(js))
			assert.Error(t, err)
		})
	}
}

func TestBuildRejects(t *testing.T) {
	tests := map[string]string{
		"no hosts":          `{"name": "x", "workloads": []}`,
		"host on no link":   `{"name": "x", "host_count": 2, "workloads": []}`,
		"host on two links": `{"name": "x", "host_count": 3, "links": [{"a": "h0", "b": "h1"}, {"a": "h0", "b": "h2"}], "workloads": []}`,
		"link to nowhere":   `{"name": "x", "host_count": 2, "links": [{"a": "h0", "b": "h9"}], "workloads": []}`,
		"fault on no link":  `{"name": "x", "host_count": 2, "links": [{"a": "h0", "b": "h1"}], "faults": [{"link": "h0-h5", "spec": "loss=1%"}], "workloads": []}`,
		"unknown host":      `{"name": "x", "host_count": 2, "links": [{"a": "h0", "b": "h1"}], "workloads": [{"from": ["h0"], "to": ["h7"]}]}`,
		"duplicate host":    `{"name": "x", "hosts": [{"name": "a"}, {"name": "a"}], "workloads": []}`,
		"MTU too big":       `{"name": "x", "host_count": 2, "links": [{"a": "h0", "b": "h1"}], "workloads": [{"from": ["h0"], "to": ["h1"], "mtu": 4096}]}`,
	}
	for name, js := range tests {
		t.Run(name, func(t *testing.T) {
			sc, err := Parse([]byte(js))
			require.NoError(t, err)
			_, err = Run(sc, 1)
			assert.Error(t, err)
		})
	}
}

// FuzzParse feeds the scenario reader arbitrary bytes: it must return an
// error or a scenario, never panic, and what it accepts must survive a
// write and a second read.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("../testdata/scenarios/*.json")
	for _, file := range files {
		b, err := os.ReadFile(file)
		require.NoError(f, err)
		f.Add(b)
	}
	f.Add([]byte(`{"name": "x", "workloads": [{"from": ["*"], "to": ["*"], "size": {"list": [1, -2]}}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		sc, err := Parse(b)
		if err != nil {
			return
		}
		out, err := MarshalScenario(sc)
		require.NoError(t, err)
		_, err = Parse(out)
		require.NoError(t, err, "%s", out)
	})
}
