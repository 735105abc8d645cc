package verbsapi

import (
	"fmt"
	"math"
	"net/netip"

	"github.com/softroce/softroce/rxe"
)

// PD is a protection domain (struct ibv_pd): the memory regions, QPs, SRQs
// and address handles created in it work together, and only together.
type PD struct {
	ctx *Context
	pd  *rxe.PD
	// Children this PD tracks for Context.Close (under ctx.mu).
	mrs map[*MR]struct{}
	ahs map[*AH]struct{}
}

// Handle returns the PD's handle.
func (pd *PD) Handle() uint32 { return pd.pd.Handle() }

// Context returns the context the PD was allocated on.
func (pd *PD) Context() *Context { return pd.ctx }

// Dealloc destroys the PD (ibv_dealloc_pd). It fails with ErrBusy while
// memory regions, QPs, SRQs or address handles remain in it.
func (pd *PD) Dealloc() error {
	if err := pd.ctx.dev.DeallocPD(pd.pd); err != nil {
		return err
	}
	pd.ctx.mu.Lock()
	delete(pd.ctx.pds, pd)
	pd.ctx.mu.Unlock()
	return nil
}

// destroyChildren deregisters the PD's MRs and destroys its AHs (for
// Context.Close; QPs and SRQs are destroyed before).
func (pd *PD) destroyChildren() error {
	pd.ctx.mu.Lock()
	mrs, ahs := keys(pd.mrs), keys(pd.ahs)
	pd.ctx.mu.Unlock()
	var first error
	for _, m := range mrs {
		if err := m.Dereg(); err != nil && first == nil {
			first = err
		}
	}
	for _, a := range ahs {
		if err := a.Destroy(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// MR is a memory region (struct ibv_mr): a Go byte slice registered for
// local and remote access. Its address (Addr) is the address of its first
// byte, or the I/O virtual address it was registered at.
type MR struct {
	pd *PD
	mr *rxe.MR
}

// RegMR registers buf (ibv_reg_mr). Remote write and remote atomic access
// require local write, as in verbs. buf must stay referenced only through
// the MR while remote peers may write it (Go does not move heap objects, and
// the MR keeps buf alive).
func (pd *PD) RegMR(buf []byte, access Access) (*MR, error) {
	return pd.reg(pd.ctx.dev.RegMR(pd.pd, buf, access))
}

// RegMRIOVA registers buf at the I/O virtual address iova instead of its own
// address (ibv_reg_mr_iova): peers then name its bytes iova + offset.
func (pd *PD) RegMRIOVA(buf []byte, iova uint64, access Access) (*MR, error) {
	return pd.reg(pd.ctx.dev.RegMRIOVA(pd.pd, buf, iova, access))
}

// RegMRKey registers buf at iova as RegMRIOVA does, but under the chosen
// key (lkey, and rkey with remote access), whose index (key >> 8) must be
// free. It exists so that a re-registration (ibv_rereg_mr) can keep the keys
// peers already hold, as rxe does; everyone else wants RegMR, whose keys
// cannot be guessed.
func (pd *PD) RegMRKey(buf []byte, iova uint64, key uint32, access Access) (*MR, error) {
	return pd.reg(pd.ctx.dev.RegMRKey(pd.pd, buf, iova, key, access))
}

func (pd *PD) reg(m *rxe.MR, err error) (*MR, error) {
	if err != nil {
		return nil, err
	}
	mr := &MR{pd: pd, mr: m}
	pd.ctx.mu.Lock()
	pd.mrs[mr] = struct{}{}
	pd.ctx.mu.Unlock()
	return mr, nil
}

// LKey returns the local key (for SGE.LKey).
func (m *MR) LKey() uint32 { return m.mr.LKey() }

// RKey returns the remote key peers use, 0 when the region allows no remote
// access.
func (m *MR) RKey() uint32 { return m.mr.RKey() }

// Addr returns the region's address: what SGEs and remote peers name its
// first byte by.
func (m *MR) Addr() uint64 { return m.mr.Addr() }

// Len returns the region's length in bytes.
func (m *MR) Len() int { return m.mr.Len() }

// Bytes returns the registered memory.
func (m *MR) Bytes() []byte { return m.mr.Bytes() }

// Access returns the flags the region was registered with.
func (m *MR) Access() Access { return m.mr.Access() }

// PD returns the region's protection domain.
func (m *MR) PD() *PD { return m.pd }

// SGE returns the scatter/gather element for length bytes of the region
// from offset off. It does not check the bounds against the region: the
// device does, when the work request runs, and fails it as a NIC would. It
// panics, as slicing out of range does, when off or length is negative or
// length does not fit the SGE's 32 bits (ibv_sge.length): a message over
// 4 GiB - 1 takes several SGEs or work requests, and a silently truncated
// length would move the wrong bytes.
func (m *MR) SGE(off, length int) SGE {
	if off < 0 || length < 0 || uint64(length) > math.MaxUint32 {
		panic(fmt.Sprintf("verbsapi: SGE of mr %#x at offset %d, length %d: out of range (a length is 0 to 4 GiB - 1)", m.mr.LKey(), off, length))
	}
	return SGE{Addr: m.mr.Addr() + uint64(off), Length: uint32(length), LKey: m.mr.LKey()}
}

// Dereg deregisters the region (ibv_dereg_mr); its keys stop working at
// once.
func (m *MR) Dereg() error {
	if err := m.pd.ctx.dev.DeregMR(m.mr); err != nil {
		return err
	}
	m.pd.ctx.mu.Lock()
	delete(m.pd.mrs, m)
	m.pd.ctx.mu.Unlock()
	return nil
}

// AHAttr is struct ibv_ah_attr for RoCE: the GRH fields (struct
// ibv_global_route) and the port. RoCE has no LIDs or service levels.
type AHAttr struct {
	// DGID is the destination GID: an IPv4, IPv4-mapped or IPv6 address.
	DGID netip.Addr
	// SGIDIndex is the local GID to send from: its address family must be
	// DGID's.
	SGIDIndex uint8
	// HopLimit is the IP TTL / hop limit; 0 means 64.
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32
	// PortNum is the local port; 0 means 1, the only port.
	PortNum uint8
}

// av converts the attributes to the engine's address vector.
func (a AHAttr) av() (AddressVector, error) {
	if a.PortNum > 1 {
		return AddressVector{}, fmt.Errorf("port %d: only port 1 exists: %w", a.PortNum, ErrInvalid)
	}
	hop := a.HopLimit
	if hop == 0 {
		hop = 64
	}
	return AddressVector{DGID: a.DGID, SGIDIndex: a.SGIDIndex, HopLimit: hop,
		TrafficClass: a.TrafficClass, FlowLabel: a.FlowLabel}, nil
}

// AH is an address handle (struct ibv_ah) for UD sends.
type AH struct {
	pd *PD
	ah *rxe.AH
}

// CreateAH creates an address handle (ibv_create_ah).
func (pd *PD) CreateAH(attr AHAttr) (*AH, error) {
	av, err := attr.av()
	if err != nil {
		return nil, fmt.Errorf("create ah in pd %d: %w", pd.Handle(), err)
	}
	a, err := pd.ctx.dev.CreateAH(pd.pd, av)
	if err != nil {
		return nil, err
	}
	ah := &AH{pd: pd, ah: a}
	pd.ctx.mu.Lock()
	pd.ahs[ah] = struct{}{}
	pd.ctx.mu.Unlock()
	return ah, nil
}

// AV returns the handle's address vector, for SendWR.AH.
func (a *AH) AV() *AddressVector { return a.ah.AV() }

// Destroy destroys the handle (ibv_destroy_ah).
func (a *AH) Destroy() error {
	if err := a.pd.ctx.dev.DestroyAH(a.ah); err != nil {
		return err
	}
	a.pd.ctx.mu.Lock()
	delete(a.pd.ahs, a)
	a.pd.ctx.mu.Unlock()
	return nil
}

// Rereg changes the region in place (ibv_rereg_mr): it moves to pd, covers
// buf at iova (a nil buf keeps the memory) and gets access, keeping its keys
// so that a peer's rkey reaches the new registration, in one step.
func (m *MR) Rereg(pd *PD, buf []byte, iova uint64, access Access) error {
	if pd == nil {
		pd = m.pd
	}
	if err := m.pd.ctx.dev.ReregMR(m.mr, pd.pd, buf, iova, access); err != nil {
		return err
	}
	if pd != m.pd {
		m.pd.ctx.mu.Lock()
		delete(m.pd.mrs, m)
		pd.mrs[m] = struct{}{}
		m.pd.ctx.mu.Unlock()
		m.pd = pd
	}
	return nil
}
