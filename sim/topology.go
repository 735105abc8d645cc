package sim

import (
	"fmt"
	"slices"
)

// FatTreeSpec generates a k-ary fat-tree (Al-Fares et al.): k pods of k/2
// edge (ToR) and k/2 aggregation switches, (k/2)² core switches, k/2 hosts
// per edge switch, k³/4 hosts in all (h0.. in pod order). Every edge switch
// links to every aggregation switch of its pod; aggregation switch j of
// each pod links to core switches j·k/2 .. j·k/2+k/2-1. Host links take
// Host, switch-to-switch links Fabric; Oversubscription > 1 puts more hosts
// on each edge switch (k/2·Oversubscription) for the same uplinks.
type FatTreeSpec struct {
	K                int      `json:"k"`
	Oversubscription int      `json:"oversubscription,omitempty"`
	Latency          Duration `json:"latency,omitempty"` // every switch's forwarding latency
	PFC              *PFCSpec `json:"pfc,omitempty"`     // every switch's flow control
	Host             PipeSpec `json:"host"`
	Fabric           PipeSpec `json:"fabric"`
	// HostDown, when set, shapes the edge->host direction (the ToR's
	// output queue towards the host, where incast congests).
	HostDown *PipeSpec `json:"host_down,omitempty"`
}

// LeafSpineSpec generates a two-tier Clos: Leaves leaf switches with
// HostsPerLeaf hosts each, every leaf linked to every one of Spines spine
// switches. Oversubscription follows from the numbers and bandwidths.
type LeafSpineSpec struct {
	Leaves       int       `json:"leaves"`
	Spines       int       `json:"spines"`
	HostsPerLeaf int       `json:"hosts_per_leaf"`
	Latency      Duration  `json:"latency,omitempty"`
	PFC          *PFCSpec  `json:"pfc,omitempty"`
	Host         PipeSpec  `json:"host"`
	Fabric       PipeSpec  `json:"fabric"`
	HostDown     *PipeSpec `json:"host_down,omitempty"`
}

// maxGeneratedHosts bounds a generated topology, as host_count is bounded.
const maxGeneratedHosts = 1 << 16

// withTopology returns sc with the hosts, switches and links its fat_tree
// or leaf_spine generates appended, and the generator removed (sc itself is
// left alone): the result is the explicit topology, which expands to
// itself.
func (sc *Scenario) withTopology() (*Scenario, error) {
	gens := 0
	for _, set := range []bool{sc.FatTree != nil, sc.LeafSpine != nil, sc.HPCCTopology != nil} {
		if set {
			gens++
		}
	}
	if gens == 0 {
		return sc, nil
	}
	if gens > 1 {
		return nil, fmt.Errorf("scenario %s: fat_tree, leaf_spine, hpcc_topology: give one topology", sc.Name)
	}
	if sc.Star != nil || sc.HostCount > 0 || len(sc.Hosts) > 0 {
		return nil, fmt.Errorf("scenario %s: a generated topology makes its own hosts: drop star, host_count and hosts", sc.Name)
	}
	out := *sc
	out.FatTree, out.LeafSpine, out.HPCCTopology = nil, nil, nil
	out.Switches = slices.Clone(sc.Switches)
	out.Links = slices.Clone(sc.Links)
	host := func(i int) string { return fmt.Sprintf("h%d", i) }
	if sc.HPCCTopology != nil {
		if err := sc.HPCCTopology.expand(&out); err != nil {
			return nil, err
		}
		return &out, nil
	}
	var pfc *PFCSpec
	if sc.FatTree != nil {
		pfc = sc.FatTree.PFC
	} else {
		pfc = sc.LeafSpine.PFC
	}
	addSw := func(name string, lat Duration) {
		out.Switches = append(out.Switches, SwitchSpec{Name: name, Latency: lat, PFC: pfc})
	}
	hostLink := func(h, sw string, up PipeSpec, down *PipeSpec) {
		l := LinkSpec{A: h, B: sw, PipeSpec: up}
		if down != nil {
			l.BA = down
		}
		out.Links = append(out.Links, l)
	}
	fabric := func(a, b string, ps PipeSpec) { out.Links = append(out.Links, LinkSpec{A: a, B: b, PipeSpec: ps}) }
	switch {
	case sc.FatTree != nil:
		ft := sc.FatTree
		k := ft.K
		over := max(ft.Oversubscription, 1)
		if k < 2 || k%2 != 0 || k > 64 {
			return nil, fmt.Errorf("scenario %s: fat_tree k %d: want an even number 2..64", sc.Name, k)
		}
		half := k / 2
		perEdge := half * over
		if k*half*perEdge > maxGeneratedHosts {
			return nil, fmt.Errorf("scenario %s: fat_tree makes %d hosts, more than %d", sc.Name, k*half*perEdge, maxGeneratedHosts)
		}
		for c := 0; c < half*half; c++ {
			addSw(fmt.Sprintf("core%d", c), ft.Latency)
		}
		h := 0
		for p := 0; p < k; p++ {
			for j := 0; j < half; j++ {
				addSw(fmt.Sprintf("agg%d_%d", p, j), ft.Latency)
				for c := 0; c < half; c++ {
					fabric(fmt.Sprintf("agg%d_%d", p, j), fmt.Sprintf("core%d", j*half+c), ft.Fabric)
				}
			}
			for e := 0; e < half; e++ {
				edge := fmt.Sprintf("edge%d_%d", p, e)
				addSw(edge, ft.Latency)
				for j := 0; j < half; j++ {
					fabric(edge, fmt.Sprintf("agg%d_%d", p, j), ft.Fabric)
				}
				for i := 0; i < perEdge; i++ {
					hostLink(host(h), edge, ft.Host, ft.HostDown)
					h++
				}
			}
		}
		out.HostCount = h
	case sc.LeafSpine != nil:
		ls := sc.LeafSpine
		if ls.Leaves < 1 || ls.Spines < 1 || ls.HostsPerLeaf < 1 || ls.Leaves*ls.HostsPerLeaf > maxGeneratedHosts {
			return nil, fmt.Errorf("scenario %s: leaf_spine wants at least one leaf, spine and host per leaf, and at most %d hosts", sc.Name, maxGeneratedHosts)
		}
		for s := 0; s < ls.Spines; s++ {
			addSw(fmt.Sprintf("spine%d", s), ls.Latency)
		}
		h := 0
		for l := 0; l < ls.Leaves; l++ {
			leaf := fmt.Sprintf("leaf%d", l)
			addSw(leaf, ls.Latency)
			for s := 0; s < ls.Spines; s++ {
				fabric(leaf, fmt.Sprintf("spine%d", s), ls.Fabric)
			}
			for i := 0; i < ls.HostsPerLeaf; i++ {
				hostLink(host(h), leaf, ls.Host, ls.HostDown)
				h++
			}
		}
		out.HostCount = h
	}
	return &out, nil
}
