package link

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
)

// Capture returns l with every frame it sends and receives written to w, with
// the time now returns (pass a virtual clock to get files that depend only on
// the traffic). Frames sent are written before l sends them, with the comment
// "out"; frames received after l returns them, with "in". A received IPv4
// header the link had to rebuild (Frame.IPIDUnknown: a UDP socket does not
// show the sender's IP ID) is written with the ID and DF bit recovered from
// the ICRC (RecoverIPv4ID), so that the capture shows what was on the wire
// and its ICRCs check, commented "in ipid-recovered"; when no ID fits, as
// written, "in ipid-unknown". A failing write does not disturb the traffic:
// it is counted and the first error kept (Err). Closing the link does not
// close w.
func Capture(l Link, w *pcapio.Writer, now func() time.Time) *Captured {
	return &Captured{inner: l, w: w, now: now}
}

// Captured is a link whose traffic is written to a capture file.
type Captured struct {
	inner Link
	w     *pcapio.Writer
	now   func() time.Time

	out, in, errs atomic.Uint64
	errMu         sync.Mutex
	err           error

	scratch []byte // Recv's copy of a frame whose IPv4 ID it recovers
}

// Send writes the frames to the capture, then sends them.
func (c *Captured) Send(frames []Frame) (int, error) {
	t := c.now()
	for i := range frames {
		c.write(t, frames[i].Data, "out")
	}
	c.out.Add(uint64(len(frames)))
	return c.inner.Send(frames)
}

// Recv receives frames and writes them to the capture.
func (c *Captured) Recv(frames []Frame) (int, error) {
	n, err := c.inner.Recv(frames)
	if n > 0 {
		t := c.now()
		for i := range frames[:n] {
			if frames[i].IPIDUnknown {
				c.writeRecovered(t, frames[i].Data)
				continue
			}
			c.write(t, frames[i].Data, "in")
		}
		c.in.Add(uint64(n))
	}
	return n, err
}

// writeRecovered writes a received frame whose IPv4 header the link rebuilt,
// with the sender's ID and DF bit put back when the ICRC tells them. Links
// call Recv from one goroutine, so one scratch buffer serves.
func (c *Captured) writeRecovered(t time.Time, data []byte) {
	c.scratch = append(c.scratch[:0], data...)
	var f packet.Frame
	if packet.ParseFrame(c.scratch, &f) == nil && f.IsIPv4() {
		if id, df, ok := packet.RecoverIPv4ID(&f); ok {
			packet.SetIPv4ID(f.IP, id, df)
			c.write(t, c.scratch, "in ipid-recovered")
			return
		}
	}
	c.write(t, data, "in ipid-unknown")
}

func (c *Captured) write(t time.Time, data []byte, comment string) {
	if err := c.w.WritePacket(t, data, comment); err != nil {
		c.errs.Add(1)
		c.errMu.Lock()
		if c.err == nil {
			c.err = err
		}
		c.errMu.Unlock()
	}
}

// Err returns the first capture write error, if any.
func (c *Captured) Err() error {
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.err
}

// MTU returns the wrapped link's MTU.
func (c *Captured) MTU() int { return c.inner.MTU() }

// MAC returns the wrapped link's MAC.
func (c *Captured) MAC() [6]byte { return c.inner.MAC() }

// Close closes the wrapped link (not the capture writer).
func (c *Captured) Close() error { return c.inner.Close() }

// Unwrap returns the wrapped link.
func (c *Captured) Unwrap() Link { return c.inner }

// AppendCounters implements Counting.
func (c *Captured) AppendCounters(dst []Counter) []Counter {
	return append(dst, Counter{"capture_out", c.out.Load()}, Counter{"capture_in", c.in.Load()},
		Counter{"capture_errors", c.errs.Load()})
}
