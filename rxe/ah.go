package rxe

import (
	"fmt"

	"github.com/softroce/softroce/qp"
)

// AH is an address handle: a validated address vector for UD sends.
type AH struct {
	d      *Device
	pd     *PD
	av     qp.AddressVector
	handle uint32
	dead   bool
}

// CreateAH creates an address handle in pd (ibv_create_ah). The AV must name
// a destination GID and a source GID index that exists, of the same address
// family.
func (d *Device) CreateAH(pd *PD, av qp.AddressVector) (*AH, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.checkPD(pd); err != nil {
		return nil, fmt.Errorf("create ah: %w", err)
	}
	if err := d.checkAV(&av); err != nil {
		return nil, fmt.Errorf("create ah in pd %d: %w", pd.handle, err)
	}
	if d.ahs >= MaxAH {
		return nil, fmt.Errorf("create ah in pd %d: %w", pd.handle, ErrLimit)
	}
	av.DGID = av.DGID.Unmap()
	a := &AH{d: d, pd: pd, av: av, handle: d.nextHandle()}
	d.ahs++
	pd.users++
	return a, nil
}

// AV returns the handle's address vector, for SendWR.AH. The engine copies
// it at post time.
func (a *AH) AV() *qp.AddressVector { return &a.av }

// Handle returns the AH's handle, unique among the device's objects.
func (a *AH) Handle() uint32 { return a.handle }

// DestroyAH destroys an address handle.
func (d *Device) DestroyAH(a *AH) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case a == nil:
		return fmt.Errorf("destroy ah: nil: %w", ErrInvalid)
	case a.d != d:
		return fmt.Errorf("destroy ah %d: %w", a.handle, ErrWrongDevice)
	case a.dead:
		return fmt.Errorf("destroy ah %d: %w", a.handle, ErrDestroyed)
	}
	a.dead = true
	d.ahs--
	a.pd.users--
	return nil
}

// checkAV validates an address vector against the GID table: the
// destination is a unicast IP (plain or IPv4-mapped), the source GID index
// exists, and both are of one family.
func (d *Device) checkAV(av *qp.AddressVector) error {
	dst := av.DGID.Unmap()
	if !dst.IsValid() || dst.IsUnspecified() {
		return fmt.Errorf("address vector has no destination GID: %w", ErrInvalid)
	}
	if dst.IsMulticast() {
		return fmt.Errorf("multicast destination %s not supported: %w", dst, ErrInvalid)
	}
	if int(av.SGIDIndex) >= len(d.gids) {
		return fmt.Errorf("source GID index %d: %w", av.SGIDIndex, ErrNoGID)
	}
	if src := d.gidIPs[av.SGIDIndex]; src.Is4() != dst.Is4() {
		return fmt.Errorf("source GID %d (%s) and destination %s differ in address family: %w",
			av.SGIDIndex, src, dst, ErrInvalid)
	}
	if av.FlowLabel > 0xFFFFF {
		return fmt.Errorf("flow label %#x exceeds 20 bits: %w", av.FlowLabel, ErrInvalid)
	}
	return nil
}
