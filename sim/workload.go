package sim

import (
	"fmt"
	"strings"

	"github.com/softroce/softroce/fault"
	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/sim/netsim"
)

// opKind is a workload operation.
type opKind uint8

const (
	opSend opKind = iota
	opSendImm
	opWrite
	opWriteImm
	opRead
	opCAS
	opFADD
	numOpKinds
)

var opKindNames = [numOpKinds]string{"SEND", "SEND_IMM", "WRITE", "WRITE_IMM", "READ", "CAS", "FADD"}

func (k opKind) String() string { return opKindNames[k] }

var opWR = [numOpKinds]qp.WROpcode{qp.WRSend, qp.WRSendImm, qp.WRWrite, qp.WRWriteImm, qp.WRRead, qp.WRCmpSwap, qp.WRFetchAdd}

// modifies reports whether the operation changes responder memory.
func (k opKind) modifies() bool { return k == opWrite || k == opWriteImm || k == opCAS || k == opFADD }

// message reports whether the operation consumes a receive at the responder.
func (k opKind) message() bool { return k == opSend || k == opSendImm || k == opWriteImm }

// Workload constants.
const (
	udQKey       = 0x11111111
	grhLen       = 40 // UD receive buffers start with the GRH area
	defaultCount = 100
	defaultSize  = 1024
	regionAlign  = 4096
	// iovaBase is where each host's simulated address space starts.
	iovaBase = 0x7f0000000000
)

// wlSpec is a workload with defaults applied.
type wlSpec struct {
	WorkloadSpec
	index   int
	typ     qp.Type
	weights [numOpKinds]int
	total   int
	maxSize int
	rate    netsim.Time // interval between posts; 0: window-driven
}

func resolveWorkload(i int, ws WorkloadSpec) (*wlSpec, error) {
	w := &wlSpec{WorkloadSpec: ws, index: i}
	if w.Name == "" {
		w.Name = fmt.Sprintf("w%d", i)
	}
	switch strings.ToUpper(ws.Transport) {
	case "", "RC":
		w.typ = qp.RC
	case "UC":
		w.typ = qp.UC
	case "UD":
		w.typ = qp.UD
	}
	switch ws.Connect {
	case "":
	case "cm":
		if w.typ == qp.UD {
			return nil, fmt.Errorf("workload %s: connect cm takes RC or UC QPs, not UD", w.Name)
		}
	default:
		return nil, fmt.Errorf("workload %s: connect %q: want \"\" or \"cm\"", w.Name, ws.Connect)
	}
	if ws.Flows != nil {
		// A flow moves its bytes as WRITEs: nothing else is asked of the
		// responder, which then needs a single receive.
		for name := range ws.Ops {
			if name != "WRITE" {
				return nil, fmt.Errorf("workload %s: a flows workload moves its bytes with WRITE only, not %s", w.Name, name)
			}
		}
		if ws.Transport != "" && !strings.EqualFold(ws.Transport, "RC") {
			return nil, fmt.Errorf("workload %s: a flows workload runs on RC", w.Name)
		}
		w.Ops = map[string]int{"WRITE": 1}
		chunk := int(ws.Flows.Chunk)
		if chunk == 0 {
			chunk = defaultChunk
		}
		if chunk < 8 || chunk > maxMessage {
			return nil, fmt.Errorf("workload %s: chunk %d outside 8..%d", w.Name, chunk, maxMessage)
		}
		w.Size = SizeSpec{Fixed: chunk}
		if w.RecvDepth == 0 {
			w.RecvDepth = 1
		}
		if w.Window == 0 {
			w.Window = 8
		}
	}
	if len(w.Ops) == 0 {
		w.weights[opSend] = 1
	}
	for name, wt := range w.Ops {
		for k := opKind(0); k < numOpKinds; k++ {
			if opKindNames[k] == name {
				w.weights[k] = wt
			}
		}
	}
	for _, wt := range w.weights {
		w.total += wt
	}
	if w.total == 0 {
		return nil, fmt.Errorf("workload %s: all operation weights are zero", w.Name)
	}
	if w.QPs == 0 {
		w.QPs = 1
	}
	if w.Count == 0 {
		w.Count = defaultCount
	}
	if w.Window == 0 {
		w.Window = 1
	}
	if w.RecvDepth == 0 && w.receives() {
		// A workload that only WRITEs, READs or runs atomics keeps none
		// posted: no receive region to register and clear (80 MiB a run
		// of incast-dcqcn-pfc's 1 MiB slots); a SEND that arrived anyway
		// would be RNR NAKed, and a completion is an unknown WR.
		w.RecvDepth = w.Window + 1
	}
	sz := w.Size
	switch {
	case len(sz.List) > 0:
		for _, v := range sz.List {
			w.maxSize = max(w.maxSize, v)
		}
	case sz.Max > 0:
		w.maxSize = sz.Max
	case sz.Fixed > 0:
		w.maxSize = sz.Fixed
	default:
		w.maxSize = defaultSize
	}
	w.maxSize = max(w.maxSize, 8)
	if ws.Rate > 0 {
		w.rate = max(netsim.Time(float64(netsim.Second)/ws.Rate), 1)
	}
	return w, nil
}

// drawSize draws a message size.
func (w *wlSpec) drawSize(r *fault.Rand) int {
	sz := w.Size
	switch {
	case len(sz.List) > 0:
		return sz.List[r.IntN(len(sz.List))]
	case sz.Max > 0:
		return sz.Min + r.IntN(sz.Max-sz.Min+1)
	case sz.Fixed > 0:
		return sz.Fixed
	}
	return defaultSize
}

// receives reports whether the workload's operations consume receives
// at the responder (a SEND or a WRITE with immediate): one that only
// WRITEs, READs or runs atomics needs none posted.
func (w *wlSpec) receives() bool {
	for k := opKind(0); k < numOpKinds; k++ {
		if k.message() && w.weights[k] > 0 {
			return true
		}
	}
	return false
}

func (w *wlSpec) drawOp(r *fault.Rand) opKind {
	x := r.IntN(w.total)
	for k := opKind(0); k < numOpKinds; k++ {
		if x < w.weights[k] {
			return k
		}
		x -= w.weights[k]
	}
	return opSend
}

// expandHosts resolves a list of host names ("*": all) in host order.
func expandHosts(names []string, infos []hostInfo) ([]int, error) {
	var out []int
	for _, n := range names {
		if n == "*" {
			for _, h := range infos {
				out = append(out, h.Index)
			}
			continue
		}
		found := false
		for _, h := range infos {
			if h.Name == n {
				out = append(out, h.Index)
				found = true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("no host %q", n)
		}
	}
	return out, nil
}
