package rxe

import (
	"fmt"
	"math"

	"github.com/softroce/softroce/qp"
)

// RegMRIOVA registers buf as RegMR does, but at the I/O virtual address iova
// instead of the buffer's own address (ibv_reg_mr_iova): work requests and
// remote peers name its bytes as iova + offset. The simulator registers its
// regions this way so that the addresses on the wire, and so its captures,
// do not depend on where Go's heap happened to put the buffers.
func (d *Device) RegMRIOVA(pd *PD, buf []byte, iova uint64, access qp.Access) (*MR, error) {
	if uint64(len(buf)) > math.MaxUint64-iova {
		return nil, fmt.Errorf("reg mr at iova %#x: %d bytes wrap the address space: %w", iova, len(buf), ErrInvalid)
	}
	m, err := d.RegMR(pd, buf, access)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	m.va = iova
	d.mu.Unlock()
	return m, nil
}
