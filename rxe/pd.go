package rxe

import "fmt"

// PD is a protection domain: the memory regions, QPs, SRQs and address
// handles created in it may be used together, and only together.
type PD struct {
	d      *Device
	handle uint32
	mem    memory
	users  int // MRs, QPs, SRQs and AHs in the PD
	dead   bool
}

// AllocPD creates a protection domain (ibv_alloc_pd).
func (d *Device) AllocPD() (*PD, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pds >= MaxPD {
		return nil, fmt.Errorf("alloc pd on %s: %w", d.name, ErrLimit)
	}
	pd := &PD{d: d, handle: d.nextHandle()}
	pd.mem = memory{d: d, pd: pd}
	d.pds++
	return pd, nil
}

// Handle returns the PD's handle, unique among the device's objects.
func (pd *PD) Handle() uint32 { return pd.handle }

// DeallocPD destroys a protection domain. It fails with ErrBusy while memory
// regions, QPs, SRQs or address handles remain in it.
func (d *Device) DeallocPD(pd *PD) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkPD(pd); err != nil {
		return fmt.Errorf("dealloc pd: %w", err)
	}
	if pd.users > 0 {
		return fmt.Errorf("dealloc pd %d: %d objects still use it: %w", pd.handle, pd.users, ErrBusy)
	}
	pd.dead = true
	d.pds--
	return nil
}

// checkPD validates a PD argument. Called with mu held.
func (d *Device) checkPD(pd *PD) error {
	switch {
	case pd == nil:
		return fmt.Errorf("nil pd: %w", ErrInvalid)
	case pd.d != d:
		return fmt.Errorf("pd %d: %w", pd.handle, ErrWrongDevice)
	case pd.dead:
		return fmt.Errorf("pd %d: %w", pd.handle, ErrDestroyed)
	}
	return nil
}
