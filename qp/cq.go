package qp

// CQ is a completion queue: a bounded ring of work completions shared by the
// QPs created with it. A push onto a full CQ is an overflow: the CQ stops
// taking entries, raises EventCQErr, and the QP that pushed goes to ERR, as an
// RNIC does.
type CQ struct {
	ring       []WC
	head, n    int
	ext        CQRing // when set, completions go there, not to ring
	depth      int    // of ext
	overflowed bool
	armed      bool
	solicited  bool
	// Notify, when set, is called when a completion arrives on an armed CQ
	// (see Arm); the CQ disarms first, as ibv_req_notify_cq is one-shot.
	Notify func()
	// Events, when set, receives EventCQErr on overflow.
	Events func(Event)
}

// NewCQ returns a CQ that holds depth completions.
func NewCQ(depth int) *CQ {
	if depth < 1 {
		depth = 1
	}
	return &CQ{ring: make([]WC, depth)}
}

// CQRing is where a CQ's completions go when their consumer is outside the
// engine: a ring in memory shared with a program, the way a NIC writes its
// CQEs into host memory, so that polling takes no call into the device.
// The CQ then keeps no completions of its own and Poll finds none.
type CQRing interface {
	// Put stores one completion, or reports false when the ring is full.
	Put(wc WC) bool
	// Len returns how many completions wait in the ring.
	Len() int
}

// NewRingCQ returns a CQ of depth completions that go to ring.
func NewRingCQ(depth int, ring CQRing) *CQ {
	return &CQ{ext: ring, depth: max(depth, 1)}
}

// Depth returns how many completions the CQ holds.
func (c *CQ) Depth() int {
	if c.ext != nil {
		return c.depth
	}
	return len(c.ring)
}

// Len returns how many completions are waiting.
func (c *CQ) Len() int {
	if c.ext != nil {
		return c.ext.Len()
	}
	return c.n
}

// Overflowed reports whether the CQ has overflowed.
func (c *CQ) Overflowed() bool { return c.overflowed }

// Arm requests one notification: for the next completion, or with
// solicitedOnly for the next solicited or failed one.
func (c *CQ) Arm(solicitedOnly bool) {
	c.armed = true
	c.solicited = solicitedOnly
}

// push appends a completion. It reports false on overflow.
func (c *CQ) push(wc *WC, solicited bool) bool {
	if !c.overflowed && !c.store(wc) {
		c.overflowed = true
		if c.Events != nil {
			c.Events(Event{Type: EventCQErr})
		}
	}
	if c.overflowed {
		return false
	}
	if c.armed && (!c.solicited || solicited || wc.Status != WCSuccess) {
		c.armed = false
		if c.Notify != nil {
			c.Notify()
		}
	}
	return true
}

// store puts wc in the ring, or reports false when it is full.
func (c *CQ) store(wc *WC) bool {
	if c.ext != nil {
		return c.ext.Put(*wc)
	}
	if c.n == len(c.ring) {
		return false
	}
	c.ring[(c.head+c.n)%len(c.ring)] = *wc
	c.n++
	return true
}

// Poll moves up to len(out) completions into out, oldest first, and returns
// how many it moved.
func (c *CQ) Poll(out []WC) int {
	k := 0
	for k < len(out) && c.n > 0 {
		out[k] = c.ring[c.head]
		c.head = (c.head + 1) % len(c.ring)
		c.n--
		k++
	}
	return k
}

// Resize changes the depth, keeping waiting completions. It fails when more
// completions wait than the new depth holds.
func (c *CQ) Resize(depth int) bool {
	if c.ext != nil {
		return false // a ring's owner resizes with SetRing
	}
	if depth < c.n || depth < 1 {
		return false
	}
	r := make([]WC, depth)
	for i := 0; i < c.n; i++ {
		r[i] = c.ring[(c.head+i)%len(c.ring)]
	}
	c.ring, c.head = r, 0
	return true
}

// SetRing moves a ring CQ to a new ring of depth completions (the resize
// of a CQ whose ring is shared memory: a new ring replaces the old, whose
// waiting completions its consumer still reads). It fails when the CQ is
// not a ring CQ or depth is below 1.
func (c *CQ) SetRing(depth int, ring CQRing) bool {
	if c.ext == nil || ring == nil || depth < 1 {
		return false
	}
	c.ext, c.depth = ring, depth
	return true
}
