package verbsapi

import (
	"sync"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/rxe"
)

// The connection manager's events arrive on the device (rxe.Device.CMReady)
// and belong to whichever listener or connection of whichever context they
// name. One router per device takes them and hands each to its owner's
// channel; it runs while the device has listeners or connections and exits
// when it has none, so a device nobody connects with costs no goroutine.

// cmRouter dispatches one device's CM events.
type cmRouter struct {
	dev *rxe.Device

	mu        sync.Mutex
	running   bool
	listeners map[cm.ListenID]func(cm.Event)
	conns     map[cm.ConnID]func(cm.Event)
	ports     map[uint16]bool // rdma_cm TCP ports in use on the device
	nextPort  uint16
	wake      chan struct{} // capacity 1: look again whether to stop
}

var (
	routersMu sync.Mutex
	routers   = map[*rxe.Device]*cmRouter{}
)

// routerFor returns the device's router.
func routerFor(d *rxe.Device) *cmRouter {
	routersMu.Lock()
	defer routersMu.Unlock()
	r := routers[d]
	if r == nil {
		r = &cmRouter{dev: d, listeners: map[cm.ListenID]func(cm.Event){}, conns: map[cm.ConnID]func(cm.Event){},
			ports: map[uint16]bool{}, nextPort: 32768, wake: make(chan struct{}, 1)}
		routers[d] = r
	}
	return r
}

// cmSink is where a connection's events go: ch, and done closed at the
// peer's disconnect request.
type cmSink struct {
	ch     chan cm.Event
	done   chan struct{}
	closed bool
}

// addConn registers a connection's events and makes sure the router runs.
// Called with mu held.
func (r *cmRouter) addConn(id cm.ConnID) *cmSink {
	s := &cmSink{ch: make(chan cm.Event, 16), done: make(chan struct{})}
	r.conns[id] = s.put
	r.startLocked()
	return s
}

// put takes one event for the connection; the router calls it with its
// lock held, so it never blocks.
func (s *cmSink) put(e cm.Event) {
	if e.Kind == cm.EventDisconnectRequest && !s.closed {
		s.closed = true
		close(s.done)
	}
	select {
	case s.ch <- e:
	default:
	}
}

func (r *cmRouter) startLocked() {
	if !r.running {
		r.running = true
		go r.run()
	}
}

// run takes events until nothing is left to route to.
func (r *cmRouter) run() {
	var batch []cm.Event
	for {
		r.mu.Lock()
		if len(r.listeners) == 0 && len(r.conns) == 0 {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.mu.Unlock()
		select {
		case <-r.dev.CMReady():
		case <-r.wake:
		}
		batch = batch[:0]
		r.dev.WithCM(r.dev.Now(), func(m *cm.Manager, _ cm.Time) {
			for e, ok := m.Event(); ok; e, ok = m.Event() {
				batch = append(batch, e)
			}
		})
		for _, e := range batch {
			r.dispatch(e)
		}
	}
}

// kick wakes the router so that it notices it has nothing left to do.
func (r *cmRouter) kick() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// dispatch hands one event to its owner: a request to its listener, any
// other event to its connection. A request nobody takes is refused.
func (r *cmRouter) dispatch(e cm.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Kind == cm.EventReq || e.Kind == cm.EventSIDRReq {
		put := r.listeners[e.Listen]
		if put == nil {
			r.refuse(e)
			return
		}
		put(e)
		return
	}
	put := r.conns[e.Conn]
	if put == nil {
		return
	}
	put(e)
	if e.Kind == cm.EventTimewaitExit || e.Kind == cm.EventUnreachable || e.Kind == cm.EventRejected || e.Kind == cm.EventSIDRRep {
		delete(r.conns, e.Conn)
	}
}

// refuse rejects a request nobody takes. Called with mu held (WithCM does
// not take it).
func (r *cmRouter) refuse(e cm.Event) {
	r.dev.WithCM(r.dev.Now(), func(m *cm.Manager, now cm.Time) {
		if e.Kind == cm.EventSIDRReq {
			_ = m.SIDRReply(now, e.Conn, &packet.CMSidrRep{Status: packet.SIDRReject})
			return
		}
		_ = m.Reject(now, e.Conn, packet.RejConsumerDefined, nil)
	})
}

// port binds an rdma_cm port: want, or an ephemeral one (32768-60999, as
// ip_local_port_range) when want is 0.
func (r *cmRouter) port(want uint16) (uint16, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if want != 0 {
		if r.ports[want] {
			return 0, false
		}
		r.ports[want] = true
		return want, true
	}
	for i := 0; i < 28232; i++ {
		p := r.nextPort
		r.nextPort++
		if r.nextPort > 60999 {
			r.nextPort = 32768
		}
		if !r.ports[p] {
			r.ports[p] = true
			return p, true
		}
	}
	return 0, false
}

// release frees a port.
func (r *cmRouter) release(p uint16) {
	r.mu.Lock()
	delete(r.ports, p)
	r.mu.Unlock()
}
