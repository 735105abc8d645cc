package verbsapi

import (
	"context"
	"fmt"
	"runtime"
	"time"
)

// Waiting for a remote WRITE. An RDMA WRITE without immediate data gives
// the target no completion: the program learns of it by watching its
// memory, as perftest's latency loops spin on the last byte of the buffer.
// Reading MR.Bytes while the device writes them is a data race in Go's
// memory model; MR.Load and MR.WaitByte read under the device's lock
// instead, so they see each WRITE whole or not at all.

// Load copies len(dst) bytes of the region from offset off, seeing every
// remote WRITE, atomic and received SEND the device finished before the
// call.
func (m *MR) Load(dst []byte, off int) error { return m.mr.Load(dst, off) }

// WaitByte waits until the byte at offset off of the region equals want
// (a peer's RDMA WRITE having landed), or ctx is done. It spins briefly,
// then backs off to sleeps of at most 50 µs: a waiter that never sleeps
// starves its own device's goroutines, and the peer's, of the CPUs that
// would deliver the write.
func (m *MR) WaitByte(ctx context.Context, off int, want byte) error {
	var b [1]byte
	for spin := 0; ; spin++ {
		if err := m.Load(b[:], off); err != nil {
			return err
		}
		if b[0] == want {
			return nil
		}
		if spin%256 == 255 {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("wait for byte %d of mr %#x to be %d: %w", off, m.LKey(), want, err)
			}
		}
		if spin < 200 {
			runtime.Gosched()
		} else {
			time.Sleep(time.Duration(min(1<<min(spin-200, 6), 50)) * time.Microsecond)
		}
	}
}
