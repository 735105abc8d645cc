package rsocket

// dial.go: connecting, listening and accepting.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"github.com/softroce/softroce/verbsapi"
)

// Dial connects to an rsocket listening on to (its device address and
// rdma_cm TCP port), from the device of vc.
func Dial(ctx context.Context, vc *verbsapi.Context, to netip.AddrPort, o *Options) (*Conn, error) {
	c, err := newConn(vc, o)
	if err != nil {
		return nil, fmt.Errorf("rsocket dial %s: %w", to, err)
	}
	cm, err := vc.DialCM(ctx, c.qp, to, &verbsapi.CMParam{PrivateData: c.connData(), RetryCount: 7, RNRRetryCount: 7})
	if err != nil {
		c.release()
		return nil, fmt.Errorf("rsocket dial %s: %w", to, err)
	}
	peer, err := decodeConnData(cm.PrivateData)
	if err != nil {
		disconnect(cm)
		c.release()
		return nil, fmt.Errorf("rsocket dial %s: %w", to, err)
	}
	c.start(cm, peer)
	return c, nil
}

func disconnect(cm *verbsapi.CMConn) {
	ctx, cancel := context.WithTimeout(context.Background(), defaultCloseWait)
	defer cancel()
	_ = cm.Disconnect(ctx)
}

// Listener accepts rsocket connections on an rdma_cm TCP port.
type Listener struct {
	vc     *verbsapi.Context
	cm     *verbsapi.CMListener
	o      *Options
	addr   *net.TCPAddr
	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
}

// Listen listens on rdma_cm TCP port port of vc's device.
func Listen(vc *verbsapi.Context, port uint16, o *Options) (*Listener, error) {
	l, err := vc.ListenCM(port)
	if err != nil {
		return nil, fmt.Errorf("rsocket listen on port %d: %w", port, err)
	}
	gid, err := vc.QueryGID(1, 1)
	if err != nil {
		gid = netip.IPv4Unspecified()
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Listener{vc: vc, cm: l, o: o, ctx: ctx, cancel: cancel,
		addr: tcpAddr(netip.AddrPortFrom(gid.Unmap(), l.Port()))}, nil
}

// Accept waits for a connection; a request that is no rsocket's is refused
// and the next one taken.
func (l *Listener) Accept() (net.Conn, error) { return l.AcceptRsocket() }

// AcceptRsocket is Accept returning the *Conn.
func (l *Listener) AcceptRsocket() (*Conn, error) {
	for {
		req, err := l.cm.Accept(l.ctx)
		if err != nil {
			if l.ctx.Err() != nil {
				err = net.ErrClosed
			}
			return nil, &net.OpError{Op: "accept", Net: "rsocket", Addr: l.addr, Err: err}
		}
		peer, err := decodeConnData(req.PrivateData)
		if err != nil {
			_ = req.Reject(nil)
			continue
		}
		c, err := newConn(l.vc, l.o)
		if err != nil {
			_ = req.Reject(nil)
			return nil, &net.OpError{Op: "accept", Net: "rsocket", Addr: l.addr, Err: err}
		}
		cm, err := req.Accept(l.ctx, c.qp, &verbsapi.CMParam{PrivateData: c.connData()})
		if err != nil {
			c.release()
			if l.ctx.Err() != nil {
				return nil, &net.OpError{Op: "accept", Net: "rsocket", Addr: l.addr, Err: net.ErrClosed}
			}
			continue
		}
		c.start(cm, peer)
		return c, nil
	}
}

// Close stops listening; a blocked Accept returns net.ErrClosed.
func (l *Listener) Close() error {
	var err error
	l.once.Do(func() {
		l.cancel()
		err = l.cm.Close()
	})
	return err
}

// Addr is the listening address: the device's first address and the port.
func (l *Listener) Addr() net.Addr { return l.addr }

func tcpAddr(a netip.AddrPort) *net.TCPAddr {
	return &net.TCPAddr{IP: a.Addr().AsSlice(), Port: int(a.Port())}
}
