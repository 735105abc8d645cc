package verbsapi

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"sync"

	"github.com/softroce/softroce/rxe"
)

// The device list: what ibv_get_device_list returns. Devices are softroce
// objects of this process, so whoever creates one registers it.
var (
	devMu   sync.Mutex
	devices = map[string]*rxe.Device{}
)

// Register adds d to the list Devices returns, under d.Name(), so that code
// holding only a name can Open it. The returned function removes it again.
// Registering a second device under a name in use fails.
func Register(d *rxe.Device) (unregister func(), err error) {
	devMu.Lock()
	defer devMu.Unlock()
	if _, ok := devices[d.Name()]; ok {
		return nil, fmt.Errorf("register device %s: name in use: %w", d.Name(), ErrInvalid)
	}
	devices[d.Name()] = d
	return func() {
		devMu.Lock()
		defer devMu.Unlock()
		if devices[d.Name()] == d {
			delete(devices, d.Name())
		}
	}, nil
}

// Devices returns the registered devices sorted by name
// (ibv_get_device_list).
func Devices() []*rxe.Device {
	devMu.Lock()
	defer devMu.Unlock()
	out := make([]*rxe.Device, 0, len(devices))
	for _, d := range devices {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name() < out[j].Name() })
	return out
}

// Open opens the registered device called name (ibv_open_device on the
// entry of ibv_get_device_list with that ibv_get_device_name).
func Open(name string) (*Context, error) {
	devMu.Lock()
	d := devices[name]
	devMu.Unlock()
	if d == nil {
		return nil, fmt.Errorf("open device %q: no such device: %w", name, ErrInvalid)
	}
	return OpenDevice(d), nil
}

// Context is an open device (struct ibv_context): the root every verbs
// object is created from. It remembers what it created so that Close can
// release whatever the caller left, as closing a verbs file descriptor does.
// A Context is safe for concurrent use.
type Context struct {
	dev *rxe.Device

	mu       sync.Mutex
	closed   bool
	pds      map[*PD]struct{}
	cqs      map[*rxe.CQ]*CQ
	qps      map[*rxe.QP]*QP
	srqs     map[*rxe.SRQ]*SRQ
	mws      map[*MW]struct{}
	channels map[*CompChannel]struct{}

	events eventQueue // this context's asynchronous events (events.go)
	// onClose tells the Device that opened the context (Device.Open) that
	// it is gone.
	onClose func(*Context)
}

// OpenDevice opens a device the caller holds (ibv_open_device). Several
// contexts may be open on one device; each owns what it creates and
// receives the asynchronous events about it (events.go).
func OpenDevice(d *rxe.Device) *Context {
	c := &Context{
		dev:      d,
		pds:      map[*PD]struct{}{},
		cqs:      map[*rxe.CQ]*CQ{},
		qps:      map[*rxe.QP]*QP{},
		srqs:     map[*rxe.SRQ]*SRQ{},
		mws:      map[*MW]struct{}{},
		channels: map[*CompChannel]struct{}{},
		events:   newEventQueue(),
	}
	attachContext(c)
	return c
}

// Device returns the device the context is open on, for what the verbs do
// not cover (counters, resource listings, the link).
func (c *Context) Device() *rxe.Device { return c.dev }

// Name returns the device name (ibv_get_device_name).
func (c *Context) Name() string { return c.dev.Name() }

// check returns ErrClosed, wrapped with op, once the context is closed.
// Called with c.mu held.
func (c *Context) check(op string) error {
	if c.closed {
		return fmt.Errorf("%s on %s: %w", op, c.dev.Name(), ErrClosed)
	}
	return nil
}

// QueryDevice returns the device attributes (ibv_query_device).
func (c *Context) QueryDevice() DeviceAttr { return c.dev.QueryDevice() }

// QueryPort returns the attributes of port (ibv_query_port); the device
// has port 1 only.
func (c *Context) QueryPort(port int) (PortAttr, error) { return c.dev.QueryPort(port) }

// QueryGID returns the GID at index of port (ibv_query_gid), in its 16-byte
// form: IPv4 GIDs are ::ffff:a.b.c.d.
func (c *Context) QueryGID(port, index int) (netip.Addr, error) {
	if port != 1 {
		return netip.Addr{}, fmt.Errorf("query gid %d of port %d on %s: only port 1 exists: %w", index, port, c.dev.Name(), ErrInvalid)
	}
	return c.dev.QueryGID(index)
}

// GIDTypeRoCEv2 is the type of every GID softroce populates: it speaks
// RoCE v2 only (rxe also lists a RoCE v1 twin of each GID).
const GIDTypeRoCEv2 = "RoCE v2"

// GIDEntry is one populated GID table entry (struct ibv_gid_entry).
type GIDEntry struct {
	Index int
	GID   netip.Addr // 16-byte form
	Type  string     // GIDTypeRoCEv2
}

// QueryGIDTable returns the populated entries of port's GID table
// (ibv_query_gid_table).
func (c *Context) QueryGIDTable(port int) ([]GIDEntry, error) {
	if port != 1 {
		return nil, fmt.Errorf("query gid table of port %d on %s: only port 1 exists: %w", port, c.dev.Name(), ErrInvalid)
	}
	gids := c.dev.GIDs()
	out := make([]GIDEntry, len(gids))
	for i, g := range gids {
		out[i] = GIDEntry{Index: i, GID: g, Type: GIDTypeRoCEv2}
	}
	return out, nil
}

// GIDIndex returns the index of the GID that addr (an IPv4, IPv4-mapped or
// IPv6 address) names, or an error naming the address.
func (c *Context) GIDIndex(addr netip.Addr) (int, error) {
	i := c.dev.GIDIndex(addr)
	if i < 0 {
		return 0, fmt.Errorf("gid index of %s on %s: %w", addr, c.dev.Name(), ErrNoGID)
	}
	return i, nil
}

// Counters returns a snapshot of the device's counters (rxe's
// hw_counters, plus softroce's drop causes).
func (c *Context) Counters() Counters { return c.dev.Counters() }

// AllocPD creates a protection domain (ibv_alloc_pd).
func (c *Context) AllocPD() (*PD, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.check("alloc pd"); err != nil {
		return nil, err
	}
	p, err := c.dev.AllocPD()
	if err != nil {
		return nil, err
	}
	pd := &PD{ctx: c, pd: p, mrs: map[*MR]struct{}{}, ahs: map[*AH]struct{}{}}
	c.pds[pd] = struct{}{}
	return pd, nil
}

// Close closes the context (ibv_close_device). Objects the caller did not
// destroy are destroyed, children first, as the kernel does when a verbs
// file descriptor is closed; the device itself stays up. Later calls on the
// context and its objects fail with ErrClosed or ErrDestroyed.
func (c *Context) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return fmt.Errorf("close context on %s: %w", c.dev.Name(), ErrClosed)
	}
	c.closed = true
	qps := values(c.qps)
	srqs := values(c.srqs)
	cqs := values(c.cqs)
	mws := keys(c.mws)
	pds := keys(c.pds)
	chans := keys(c.channels)
	c.mu.Unlock()
	detachContext(c)
	close(c.events.done)
	if c.onClose != nil {
		c.onClose(c)
	}

	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	// Windows first: a region cannot be deregistered while one is bound.
	for _, w := range mws {
		keep(w.Dealloc())
	}
	for _, q := range qps {
		keep(q.Destroy())
	}
	for _, s := range srqs {
		keep(s.Destroy())
	}
	for _, pd := range pds {
		keep(pd.destroyChildren())
		keep(pd.Dealloc())
	}
	for _, cq := range cqs {
		keep(cq.Destroy())
	}
	for _, ch := range chans {
		keep(ch.Destroy())
	}
	if first != nil {
		return fmt.Errorf("close context on %s: %w", c.dev.Name(), first)
	}
	return nil
}

func keys[K comparable](m map[K]struct{}) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func values[K comparable, V any](m map[K]V) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// Flush waits until the device has sent what its QPs owe their peers (the
// ACK of a message just received above all) or ctx is done: the drain to
// call before closing a context or device whose peer still waits for it,
// in place of a sleep.
func (c *Context) Flush(ctx context.Context) error { return c.dev.Flush(ctx) }
