package sim

import (
	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe"
	"github.com/softroce/softroce/rxe/link"
	"github.com/softroce/softroce/sim/netsim"
)

// rxeDevice drives a real softroce device (rxe.Device with no link) from the
// event loop.
type rxeDevice struct {
	d      *rxe.Device
	frames []link.Frame
}

// qpSpares is the QPs of finished runs' devices, for later runs' devices to
// build theirs in (qp.Spares says why): 4,096 at most, about 8 MB, enough for
// the library's runs (scale: 1,000) on both cores.
var qpSpares = qp.Spares{Keep: 4096}

// discardDevices hands the QPs of the run's devices to qpSpares, once the
// run is over.
func (w *world) discardDevices() {
	for _, h := range w.hosts {
		if d, ok := h.dev.(*rxeDevice); ok {
			d.d.Discard()
		}
	}
}

// newRxeDevice makes h's device, its output frames' buffers from mem: made
// on the heap, they grew to their largest in every run, half a megabyte of
// garbage a run of 16 hosts.
func newRxeDevice(h hostInfo, seed uint64, fastRecovery bool, mem *arena) (*rxeDevice, error) {
	cfg := rxe.Config{Name: "rxe-" + h.Name, MAC: h.MAC, MTU: h.MTU, Seed: seed | 1, FastRecovery: fastRecovery, SingleThreaded: true, QPSpares: &qpSpares}
	if h.IP.Is4() {
		cfg.IPv4 = h.IP
	} else {
		cfg.IPv6 = h.IP
	}
	d, err := rxe.New(cfg)
	if err != nil {
		return nil, err
	}
	frames := make([]link.Frame, outputBurst)
	for i := range frames {
		frames[i].Data = mem.overwritten(rxe.MaxFrameLen)[:0] // Output writes what it uses
	}
	return &rxeDevice{d: d, frames: frames}, nil
}

func (r *rxeDevice) HandleFrame(now netsim.Time, frame []byte, intact bool) {
	r.d.HandleFrame(qp.Time(now), link.Frame{Data: frame, ICRCChecked: intact})
}

func (r *rxeDevice) Output(now netsim.Time, maxN int, emit func([]byte)) (int, bool) {
	n, more := r.d.Output(qp.Time(now), r.frames[:min(maxN, len(r.frames))])
	for i := 0; i < n; i++ {
		emit(r.frames[i].Data)
	}
	return n, more
}

func (r *rxeDevice) Tick(now netsim.Time) { r.d.Tick(qp.Time(now)) }

func (r *rxeDevice) Deadline() netsim.Time { return netsim.Time(r.d.Deadline()) }

// SetCongestion sets the device's congestion control.
func (r *rxeDevice) SetCongestion(c rxe.Congestion) error { return r.d.SetCongestion(c) }
