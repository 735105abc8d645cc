// Package rstream is librdmacm's rstream test (its custom mode: -S size,
// -C count, -I iterations) over package rsocket, so that a Go rsocket
// meets Debian's rstream, on softroce or kernel rxe, in either role.
//
// The exchange: after connecting, the client sends 16 bytes and the server
// answers 16 (the sync); then, per iteration, the client sends count
// transfers of size bytes and the server receives them, then the server
// sends as many back. Every byte sent is the next of one rolling counter
// (rstream's format_buf), so the receiver can verify (-T v).
package rstream

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/softroce/softroce/rsocket"
	"github.com/softroce/softroce/verbsapi"
)

// DefaultPort is rstream's.
const DefaultPort = 7471

// Options are rstream's custom-mode flags.
type Options struct {
	Size, Count, Iterations int
	Verify                  bool
	Conn                    *rsocket.Options
}

type side struct {
	c       *rsocket.Conn
	o       Options
	buf     []byte
	sent    uint8 // format_buf's counter
	checked uint8 // verify_buf's counter
	total   int64
}

func (s *side) send(n int) error {
	b := s.buf[:n]
	for i := range b {
		b[i] = s.sent
		s.sent++
	}
	_, err := s.c.Write(b)
	return err
}

func (s *side) recv(n int) error {
	b := s.buf[:n]
	if _, err := io.ReadFull(s.c, b); err != nil {
		return err
	}
	if !s.o.Verify {
		return nil
	}
	for _, v := range b {
		if v != s.checked {
			return fmt.Errorf("data verification failed byte %d", s.total)
		}
		s.checked++
		s.total++
	}
	return nil
}

// run is the exchange; client says which half this side does first.
func (s *side) run(out io.Writer, client bool) error {
	first, second := s.recv, s.send
	if client {
		first, second = s.send, s.recv
	}
	if err := first(16); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	if err := second(16); err != nil {
		return fmt.Errorf("sync: %w", err)
	}
	start := time.Now()
	for range s.o.Iterations {
		for range s.o.Count {
			if err := first(s.o.Size); err != nil {
				return err
			}
		}
		for range s.o.Count {
			if err := second(s.o.Size); err != nil {
				return err
			}
		}
	}
	el := time.Since(start)
	bytes := int64(s.o.Iterations) * int64(s.o.Count) * int64(s.o.Size) * 2
	us := float64(el.Microseconds())
	fmt.Fprintf(out, "%-10s%-8s%-8s%-8s%-8s%8s %10s%13s\n", "name", "bytes", "xfers", "iters", "total", "time", "Gb/sec", "usec/xfer")
	fmt.Fprintf(out, "%-10s%-8s%-8s%-8s%-8s%8.2fs%10.2f%11.2f\n", "custom", sizeStr(int64(s.o.Size)), cntStr(int64(s.o.Count)),
		cntStr(int64(s.o.Iterations)), sizeStr(bytes), us/1e6, float64(bytes*8)/(1000*us),
		us/float64(s.o.Iterations)/float64(s.o.Count*2))
	return nil
}

func (o Options) fill() Options {
	if o.Size <= 0 {
		o.Size = 1000
	}
	if o.Count <= 0 {
		o.Count = 1000
	}
	if o.Iterations <= 0 {
		o.Iterations = 1
	}
	return o
}

// Server accepts one client on port and runs the exchange.
func Server(ctx context.Context, vc *verbsapi.Context, out io.Writer, port uint16, o Options) error {
	o = o.fill()
	l, err := rsocket.Listen(vc, port, o.Conn)
	if err != nil {
		return err
	}
	defer l.Close()
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	c, err := l.AcceptRsocket()
	if err != nil {
		return err
	}
	defer c.Close()
	return (&side{c: c, o: o, buf: make([]byte, max(o.Size, 16))}).run(out, false)
}

// Client connects to a server at to and runs the exchange.
func Client(ctx context.Context, vc *verbsapi.Context, out io.Writer, to netip.AddrPort, o Options) error {
	o = o.fill()
	c, err := rsocket.Dial(ctx, vc, to, o.Conn)
	if err != nil {
		return err
	}
	defer c.Close()
	return (&side{c: c, o: o, buf: make([]byte, max(o.Size, 16))}).run(out, true)
}

// sizeStr and cntStr print sizes and counts as rstream does.
func sizeStr(n int64) string {
	base, mag := int64(1), ""
	switch {
	case n >= 1<<30:
		base, mag = 1<<30, "g"
	case n >= 1<<20:
		base, mag = 1<<20, "m"
	case n >= 1<<10:
		base, mag = 1<<10, "k"
	}
	if base == 1 {
		return fmt.Sprint(n)
	}
	if frac := (n % base) * 10 / base; n/base < 10 && frac != 0 {
		return fmt.Sprintf("%d.%d%s", n/base, frac, mag)
	}
	return fmt.Sprintf("%d%s", n/base, mag)
}

func cntStr(n int64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%db", n/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%dm", n/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%dk", n/1e3)
	}
	return fmt.Sprint(n)
}
