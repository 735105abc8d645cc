package rxe

import (
	"net/netip"
	"sort"

	"github.com/softroce/softroce/qp"
)

// Resources counts the objects the device holds, as `rdma resource show`
// summarizes them.
type Resources struct {
	PDs, MRs, MWs, CQs, SRQs, AHs, QPs int
}

// Resources returns how many objects of each kind exist.
func (d *Device) Resources() Resources {
	d.mu.Lock()
	defer d.mu.Unlock()
	return Resources{PDs: d.pds, MRs: d.mrCount, MWs: d.mwCount, CQs: d.cqs, SRQs: d.srqs, AHs: d.ahs, QPs: d.qps.len()}
}

// QPInfo describes a QP for listings (`rdma resource show qp`).
type QPInfo struct {
	QPN     uint32
	Type    qp.Type
	State   qp.State
	PD      uint32 // PD handle
	SrcPort uint16
	DestQPN uint32     // RC/UC
	Remote  netip.Addr // RC/UC: the AV's destination
	PathMTU qp.MTU
}

// HasQP reports whether the device has a QP numbered qpn.
func (d *Device) HasQP(qpn uint32) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.qps.get(qpn) != nil
}

// QPs lists the device's QPs in QPN order.
func (d *Device) QPs() []QPInfo {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]QPInfo, 0, len(d.qpList))
	for _, x := range d.qpList {
		a := x.q.Query()
		out = append(out, QPInfo{QPN: x.qpn, Type: x.init.Type, State: a.State, PD: x.pd.handle,
			SrcPort: x.sport, DestQPN: a.DestQPN, Remote: x.remote, PathMTU: a.PathMTU})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].QPN < out[j].QPN })
	return out
}
