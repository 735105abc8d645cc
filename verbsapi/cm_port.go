package verbsapi

import (
	"context"
	"fmt"
	"time"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/rxe"
)

// CMPort is the device's connection manager for a consumer that keeps its
// own rdma_cm state, as the kernel's ucma does for librdmacm: the drop-in
// librdmacm's server uses it. Events reach the consumer through sinks it
// registers, one per listener and per connection; a sink is called from the
// device's router goroutine with the router's lock held, so it must not
// block or call the CMPort. ListenCM and DialCM are built on the same
// router, and share the device's rdma_cm port table with it.
type CMPort struct {
	c *Context
	r *cmRouter
}

// CMPort returns the context's device's connection manager.
func (c *Context) CMPort() *CMPort { return &CMPort{c: c, r: routerFor(c.dev)} }

// Do runs fn with the connection manager, as rxe.Device.WithCM.
func (p *CMPort) Do(fn func(m *cm.Manager, now cm.Time)) { p.c.dev.WithCM(p.c.dev.Now(), fn) }

// Track runs fn (which starts a connection: Connect, Accept, SIDRRequest)
// and, if it succeeds, routes the connection's events to sink, with no
// event lost in between.
func (p *CMPort) Track(fn func(m *cm.Manager, now cm.Time) (cm.ConnID, error), sink func(cm.Event)) (cm.ConnID, error) {
	var id cm.ConnID
	var err error
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	p.c.dev.WithCM(p.c.dev.Now(), func(m *cm.Manager, now cm.Time) {
		if id, err = fn(m, now); err == nil {
			p.r.conns[id] = sink
			p.r.startLocked()
		}
	})
	return id, err
}

// Untrack stops routing a connection's events.
func (p *CMPort) Untrack(id cm.ConnID) {
	p.r.mu.Lock()
	delete(p.r.conns, id)
	p.r.mu.Unlock()
	p.r.kick()
}

// Listen takes REQs and SIDR_REQs for serviceID and hands them to sink.
func (p *CMPort) Listen(serviceID uint64, sink func(cm.Event)) (cm.ListenID, error) {
	var l cm.ListenID
	var err error
	p.r.mu.Lock()
	defer p.r.mu.Unlock()
	p.c.dev.WithCM(p.c.dev.Now(), func(m *cm.Manager, _ cm.Time) {
		if l, err = m.Listen(serviceID); err == nil {
			p.r.listeners[l] = sink
			p.r.startLocked()
		}
	})
	if err != nil {
		return 0, fmt.Errorf("listen on service ID %#x: %w", serviceID, err)
	}
	return l, nil
}

// Unlisten stops a listener.
func (p *CMPort) Unlisten(l cm.ListenID) {
	p.r.mu.Lock()
	delete(p.r.listeners, l)
	p.c.dev.WithCM(p.c.dev.Now(), func(m *cm.Manager, _ cm.Time) { m.Unlisten(l) })
	p.r.mu.Unlock()
	p.r.kick()
}

// BindPort takes an rdma_cm TCP port of the device: want, or an ephemeral
// one when want is 0. It reports false when the port is taken.
func (p *CMPort) BindPort(want uint16) (uint16, bool) { return p.r.port(want) }

// ReleasePort gives a port back.
func (p *CMPort) ReleasePort(port uint16) { p.r.release(port) }

// DrainCM waits until the device's connection manager holds no connection:
// every disconnect answered and every timewait over (about 2 s after the
// last disconnect), or until ctx ends. A kernel's connection manager
// outlives the process that used it; a device that a program's exit
// closes calls this first, so that a peer's DREQ still gets its DREP.
func (d *Device) DrainCM(ctx context.Context) error { return drainCM(ctx, d.dev) }

// DrainCM is Device.DrainCM for the context's device.
func (c *Context) DrainCM(ctx context.Context) error { return drainCM(ctx, c.dev) }

func drainCM(ctx context.Context, d *rxe.Device) error {
	for {
		n := 0
		d.WithCM(d.Now(), func(m *cm.Manager, _ cm.Time) { n = m.Conns() })
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drain the connection manager of %s: %d connections left: %w", d.Name(), n, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
