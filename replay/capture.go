package replay

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
)

// Frame is one RoCE v2 frame of a capture, decoded.
type Frame struct {
	No       int           // frame number in the capture, from 1
	Time     time.Duration // since the capture's first frame
	Data     []byte        // the captured bytes (an Ethernet frame when the capture has Ethernet)
	Src, Dst netip.Addr    // IP addresses (IPv4-mapped ones unmapped)
	SrcPort  uint16
	TTL, TOS uint8
	MAC      [6]byte // Ethernet source address; zero without Ethernet
	Pkt      packet.Packet
}

// String describes the frame in one line: number, addresses and the
// transport fields that matter to a replay.
func (f *Frame) String() string {
	return fmt.Sprintf("#%d %s -> %s %s", f.No, f.Src, f.Dst, Describe(&f.Pkt))
}

// Capture is the RoCE part of a capture file.
type Capture struct {
	Name   string
	Frames []*Frame // RoCE v2 frames that decode, capture order
	OOB    []OOBRecord
	// CM holds the REQs and REPs of its rdma_cm exchanges (cmrec.go).
	CM []CMRecord
	// Skipped counts RoCE v2 frames whose transport packet does not decode.
	Skipped int
}

// Load reads a capture file.
func Load(path string) (*Capture, error) {
	r, err := pcapio.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	c, err := Read(r)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	c.Name = path
	return c, nil
}

// Read reads a capture from r.
func Read(r *pcapio.Reader) (*Capture, error) {
	c := &Capture{}
	var t0 time.Time
	var oob oobReader
	for no := 1; ; no++ {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("frame %d: %w", no, err)
		}
		if t0.IsZero() {
			t0 = rec.Time
		}
		var f packet.Frame
		if err := rec.Frame(&f); err != nil {
			if ip, err := rec.IP(); err == nil {
				if o, ok := oob.segment(ip, no); ok {
					c.OOB = append(c.OOB, o)
				}
			}
			continue
		}
		// Keep an Ethernet frame of our own: devices take Ethernet, and
		// rec.Data is the reader's.
		var data []byte
		if f.Eth != nil {
			data = append(data, rec.Data...)
		} else {
			data = ethHeader(nil, [6]byte{}, [6]byte{}, f.IsIPv4())
			data = append(data, f.IP...)
			data = append(data, f.UDP...)
			data = append(data, f.Transport...)
		}
		if err := packet.ParseFrame(data, &f); err != nil {
			c.Skipped++
			continue
		}
		fr := &Frame{No: no, Time: rec.Time.Sub(t0), Data: data}
		if err := fr.Pkt.Decode(f.Transport); err != nil {
			c.Skipped++
			continue
		}
		a := f.Addressing()
		fr.Src, fr.Dst, fr.SrcPort, fr.TTL, fr.TOS = a.Src.Unmap(), a.Dst.Unmap(), a.SrcPort, a.HopLimit, a.TrafficClass
		copy(fr.MAC[:], f.Eth[6:12])
		c.Frames = append(c.Frames, fr)
	}
	c.CM = cmRecords(c.Frames)
	return c, nil
}

// ethHeader appends an Ethernet II header.
func ethHeader(b []byte, dst, src [6]byte, ipv4 bool) []byte {
	b = append(b, dst[:]...)
	b = append(b, src[:]...)
	if ipv4 {
		return append(b, 0x08, 0x00)
	}
	return append(b, 0x86, 0xdd)
}
