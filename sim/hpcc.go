package sim

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/softroce/softroce/sim/netsim"
)

// The HPCC ns-3 simulator's input files (alibaba-edu/High-Precision-
// Congestion-Control: simulation/mix/*.txt), read as they are, so that the
// same topology and the same flows run in both simulators and their FCTs
// can be set side by side.

// HPCCTopologySpec imports a topology file: a line "nodes switches links",
// a line of the switches' node IDs, then one link per line: "a b bandwidth
// delay error-rate" (100Gbps, 1000ns). Hosts are named h<ID>, switches
// s<ID>. Every link direction takes Queue (0: unbounded) and the ECN
// marking listed for its bandwidth (as HPCC's KMIN_MAP, KMAX_MAP and
// PMAX_MAP); every switch takes Latency and PFC. Load reads File, relative
// to the scenario file.
type HPCCTopologySpec struct {
	File    string      `json:"file"`
	Queue   ByteSize    `json:"queue,omitempty"`
	Latency Duration    `json:"latency,omitempty"`
	ECN     []ECNByRate `json:"ecn,omitempty"`
	PFC     *PFCSpec    `json:"pfc,omitempty"`
	data    []byte
}

// ECNByRate is the RED marking of the links of one bandwidth.
type ECNByRate struct {
	Bandwidth Bandwidth `json:"bandwidth"`
	REDSpec
}

// expand turns the topology file into hosts, switches and links.
func (h *HPCCTopologySpec) expand(sc *Scenario) error {
	if h.data == nil {
		return fmt.Errorf("hpcc_topology %s: not read (scenarios that name files are loaded with Load)", h.File)
	}
	lines := fields(h.data)
	if len(lines) < 2 || len(lines[0]) != 3 {
		return fmt.Errorf("hpcc_topology %s: want a first line \"nodes switches links\"", h.File)
	}
	n, err1 := strconv.Atoi(lines[0][0])
	ns, err2 := strconv.Atoi(lines[0][1])
	nl, err3 := strconv.Atoi(lines[0][2])
	if err1 != nil || err2 != nil || err3 != nil || n < 1 || n > maxHosts+maxGeneratedHosts || ns < 0 || ns > n || nl < 0 {
		return fmt.Errorf("hpcc_topology %s: bad counts %v", h.File, lines[0])
	}
	isSwitch := make([]bool, n)
	if len(lines[1]) != ns {
		return fmt.Errorf("hpcc_topology %s: line 2 lists %d switches, line 1 says %d", h.File, len(lines[1]), ns)
	}
	for _, f := range lines[1] {
		id, err := strconv.Atoi(f)
		if err != nil || id < 0 || id >= n {
			return fmt.Errorf("hpcc_topology %s: switch %q: want a node ID below %d", h.File, f, n)
		}
		isSwitch[id] = true
	}
	name := func(id int) string {
		if isSwitch[id] {
			return "s" + strconv.Itoa(id)
		}
		return "h" + strconv.Itoa(id)
	}
	for id := 0; id < n; id++ {
		if isSwitch[id] {
			sc.Switches = append(sc.Switches, SwitchSpec{Name: name(id), Latency: h.Latency, PFC: h.PFC})
		} else {
			sc.Hosts = append(sc.Hosts, HostSpec{Name: name(id)})
		}
	}
	if len(lines)-2 < nl {
		return fmt.Errorf("hpcc_topology %s: %d links listed, line 1 says %d", h.File, len(lines)-2, nl)
	}
	for i, l := range lines[2 : 2+nl] {
		if len(l) < 4 {
			return fmt.Errorf("hpcc_topology %s: link %d: want \"a b bandwidth delay [error-rate]\"", h.File, i)
		}
		a, errA := strconv.Atoi(l[0])
		b, errB := strconv.Atoi(l[1])
		if errA != nil || errB != nil || a < 0 || b < 0 || a >= n || b >= n {
			return fmt.Errorf("hpcc_topology %s: link %d: bad node IDs %q %q", h.File, i, l[0], l[1])
		}
		var ps PipeSpec
		if err := ps.Bandwidth.UnmarshalJSON([]byte(strconv.Quote(l[2]))); err != nil {
			return fmt.Errorf("hpcc_topology %s: link %d: %w", h.File, i, err)
		}
		if err := ps.Delay.UnmarshalJSON([]byte(strconv.Quote(l[3]))); err != nil {
			return fmt.Errorf("hpcc_topology %s: link %d: %w", h.File, i, err)
		}
		if len(l) > 4 {
			if e, err := strconv.ParseFloat(l[4], 64); err != nil || e != 0 {
				return fmt.Errorf("hpcc_topology %s: link %d: error rate %q: only 0 is supported (use faults)", h.File, i, l[4])
			}
		}
		ps.Queue = h.Queue
		for _, e := range h.ECN {
			if e.Bandwidth == ps.Bandwidth {
				red := e.REDSpec
				ps.ECN = &red
			}
		}
		sc.Links = append(sc.Links, LinkSpec{A: name(a), B: name(b), PipeSpec: ps})
	}
	return nil
}

// fields splits a text file into lines of whitespace-separated fields,
// skipping empty lines.
func fields(b []byte) [][]string {
	var out [][]string
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 {
			out = append(out, f)
		}
	}
	return out
}

// hpccFlows reads a flow file: the count, then "src dst priority dport
// size start_seconds" per flow, src and dst the node IDs of hosts h<ID>.
// Start times are taken relative to offset (the file's are absolute: the
// HPCC generator starts them at 2 s).
func hpccFlows(file string, data []byte, offset netsim.Time, hosts map[string]int) ([]flowArrival, error) {
	lines := fields(data)
	if len(lines) < 1 || len(lines[0]) != 1 {
		return nil, fmt.Errorf("flow file %s: want the number of flows on the first line", file)
	}
	n, err := strconv.Atoi(lines[0][0])
	if err != nil || n < 0 || n > maxFlows || len(lines)-1 < n {
		return nil, fmt.Errorf("flow file %s: %q flows, %d lines follow (at most %d flows)", file, lines[0][0], len(lines)-1, maxFlows)
	}
	out := make([]flowArrival, 0, n)
	for i, l := range lines[1 : 1+n] {
		if len(l) != 6 {
			return nil, fmt.Errorf("flow file %s: flow %d: want \"src dst priority dport size start\"", file, i)
		}
		src, ok1 := hosts["h"+l[0]]
		dst, ok2 := hosts["h"+l[1]]
		size, err1 := strconv.ParseInt(l[4], 10, 64)
		if !ok1 || !ok2 || src == dst || err1 != nil || size < 1 || size > maxFlowSize {
			return nil, fmt.Errorf("flow file %s: flow %d %v: want two hosts of the topology, a size and a start in seconds", file, i, l)
		}
		// Nanoseconds from the decimal digits, not through a float
		// product, so that every machine reads the same times.
		at, err := parseSecondsNs(l[5])
		if err != nil {
			return nil, fmt.Errorf("flow file %s: flow %d: %w", file, i, err)
		}
		out = append(out, flowArrival{src: src, dst: dst, size: size, at: at - offset})
		if out[len(out)-1].at < 0 {
			return nil, fmt.Errorf("flow file %s: flow %d starts at %ss, before the offset %s", file, i, l[5], offset)
		}
	}
	return out, nil
}

// parseSecondsNs reads a decimal number of seconds as nanoseconds,
// truncating digits beyond the ninth decimal.
func parseSecondsNs(s string) (netsim.Time, error) {
	whole, frac, _ := strings.Cut(s, ".")
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w < 0 || w > 1e6 {
		return 0, fmt.Errorf("start %q: want seconds", s)
	}
	frac = (frac + "000000000")[:9]
	f, err := strconv.ParseInt(frac, 10, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("start %q: want seconds", s)
	}
	return netsim.Time(w)*netsim.Second + netsim.Time(f), nil
}

// firstStartSecond is the earliest start time of a flow file, down to the
// whole second (the HPCC generator starts flows at 2 s); 0 when unknown.
func firstStartSecond(data []byte) netsim.Time {
	first := netsim.Never
	lines := fields(data)
	if len(lines) == 0 {
		return 0
	}
	for _, l := range lines[1:] {
		if len(l) == 6 {
			if t, err := parseSecondsNs(l[5]); err == nil {
				first = min(first, t)
			}
		}
	}
	if first == netsim.Never {
		return 0
	}
	return first / netsim.Second * netsim.Second
}
