package rxe

import "sync"

// devMutex is the device's lock, which a device made SingleThreaded goes
// without. The flag is set once, before the device is shared, so the
// branch costs a predicted compare where the lock costs two atomic
// operations.
type devMutex struct {
	mu  sync.Mutex
	off bool
}

func (m *devMutex) Lock() {
	if !m.off {
		m.mu.Lock()
	}
}

func (m *devMutex) Unlock() {
	if !m.off {
		m.mu.Unlock()
	}
}
