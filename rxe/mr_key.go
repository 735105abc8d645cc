package rxe

import (
	"fmt"

	"github.com/softroce/softroce/qp"
)

// RegMRKey registers buf as RegMRIOVA does, at iova, but with a chosen key
// instead of a fresh one: its lkey (and rkey, with remote access) is key,
// whose index (key >> 8) must be free. Package replay uses it to put a
// captured host's memory where the captured peer's RETHs and AtomicETHs
// address it; ordinary users want RegMR, whose keys cannot be guessed.
func (d *Device) RegMRKey(pd *PD, buf []byte, iova uint64, key uint32, access qp.Access) (*MR, error) {
	index := key >> 8
	if index < minMRIndex || index > maxMRIndex {
		return nil, fmt.Errorf("reg mr with key %#x: index %d out of range: %w", key, index, ErrInvalid)
	}
	d.mu.Lock()
	busy := int(index) < len(d.mrs) && d.mrs[index].mr != nil
	d.mu.Unlock()
	if busy {
		return nil, fmt.Errorf("reg mr with key %#x: index %d in use: %w", key, index, ErrBusy)
	}
	m, err := d.RegMRIOVA(pd, buf, iova, access)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if m.index != index {
		for int(index) >= len(d.mrs) {
			d.mrs = append(d.mrs, mrSlot{lastKey: -1})
		}
		if d.mrs[index].mr != nil {
			// Taken between the check and the registration.
			d.mrs[m.index].mr = nil
			d.mrCount--
			pd.users--
			return nil, fmt.Errorf("reg mr with key %#x: index %d in use: %w", key, index, ErrBusy)
		}
		d.mrs[m.index].mr = nil
		d.mrs[index].mr = m
		m.index = index
	}
	d.mrs[index].lastKey = int16(uint8(key))
	m.lkey = key
	if m.rkey != 0 {
		m.rkey = key
	}
	return m, nil
}
