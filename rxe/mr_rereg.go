package rxe

import (
	"fmt"
	"math"

	"github.com/softroce/softroce/qp"
)

// ReregMR changes a region in place (ibv_rereg_mr): its protection domain,
// its memory (buf at iova; a nil buf keeps both) and its access, keeping its
// keys, as rxe does, so that a peer holding the rkey reaches the new
// registration. It is one step under the device lock: no packet ever finds
// the region missing or half changed. It fails with ErrBusy while memory
// windows are bound to the region, and leaves the region as it was on any
// error.
func (d *Device) ReregMR(m *MR, pd *PD, buf []byte, iova uint64, access qp.Access) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case m == nil:
		return fmt.Errorf("rereg mr: nil: %w", ErrInvalid)
	case m.d != d:
		return fmt.Errorf("rereg mr %#x: %w", m.lkey, ErrWrongDevice)
	case m.dead:
		return fmt.Errorf("rereg mr %#x: %w", m.lkey, ErrDestroyed)
	case m.numMW > 0:
		return fmt.Errorf("rereg mr %#x: %d memory windows bound to it: %w", m.lkey, m.numMW, ErrBusy)
	}
	if err := d.checkPD(pd); err != nil {
		return fmt.Errorf("rereg mr %#x: %w", m.lkey, err)
	}
	if buf == nil {
		buf, iova = m.buf, m.va
	} else if uint64(len(buf)) > math.MaxUint64-iova {
		return fmt.Errorf("rereg mr %#x at iova %#x: %d bytes wrap the address space: %w", m.lkey, iova, len(buf), ErrInvalid)
	}
	access, err := checkMR(buf, access)
	if err != nil {
		return fmt.Errorf("rereg mr %#x: %w", m.lkey, err)
	}
	m.pd.users--
	pd.users++
	m.pd, m.buf, m.va, m.access = pd, buf, iova, access
	m.rkey = remoteKey(m.lkey, access)
	return nil
}
