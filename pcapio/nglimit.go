package pcapio

import (
	"encoding/binary"
	"fmt"
	"io"
)

// MaxInterfaces is how many interface description blocks one pcapng section
// may declare before Reader refuses the file. gopacket's pcapng reader keeps
// every interface of a section in memory (about 900 bytes each), so a small
// file made of millions of interface blocks would otherwise cost gigabytes;
// real captures declare one interface per capture point.
const MaxInterfaces = 1 << 16

// pcapng block types the limiter needs to tell apart.
const (
	ngBlockSection   = 0x0a0d0d0a // palindromic: reads the same in both byte orders
	ngBlockInterface = 0x00000001
	ngByteOrderMagic = 0x1a2b3c4d
)

// ngLimiter passes a pcapng stream through unchanged while following its
// block structure (type and length only), and fails the read that would
// hand the decoder a section's interface block beyond max. It keeps a
// header's worth of state, so it costs nothing per block but a few compares.
type ngLimiter struct {
	r   io.Reader
	max int

	bo   binary.ByteOrder // of the current section
	hdr  [12]byte         // the current block's header, as far as seen
	nhdr int
	left uint64 // bytes of the current block still to pass, after its header
	idbs int    // interface blocks in the current section
}

func newNgLimiter(r io.Reader, max int) *ngLimiter { return &ngLimiter{r: r, max: max} }

func (l *ngLimiter) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	for i := 0; i < n; {
		if l.left > 0 {
			step := uint64(n - i)
			if step > l.left {
				step = l.left
			}
			i += int(step)
			l.left -= step
			continue
		}
		l.hdr[l.nhdr] = p[i]
		l.nhdr++
		i++
		if done, herr := l.header(); herr != nil {
			// Hand over nothing of the block that broke the rule.
			return i - l.nhdr, herr
		} else if done {
			l.nhdr = 0
		}
	}
	return n, err
}

// header looks at the block header collected so far and reports whether it
// is complete; when it is, it accounts for the block.
func (l *ngLimiter) header() (bool, error) {
	if l.nhdr < 8 {
		return false, nil
	}
	typ := binary.LittleEndian.Uint32(l.hdr[:4])
	need := 8
	if typ == ngBlockSection {
		need = 12 // the byte-order magic says how to read the length
	}
	if l.nhdr < need {
		return false, nil
	}
	if typ == ngBlockSection {
		switch {
		case binary.LittleEndian.Uint32(l.hdr[8:12]) == ngByteOrderMagic:
			l.bo = binary.LittleEndian
		case binary.BigEndian.Uint32(l.hdr[8:12]) == ngByteOrderMagic:
			l.bo = binary.BigEndian
		default:
			return false, fmt.Errorf("pcapng section header: bad byte-order magic %x", l.hdr[8:12])
		}
		l.idbs = 0
	} else if l.bo == nil {
		return false, fmt.Errorf("pcapng: block type %#x before the section header", typ)
	}
	length := uint64(l.bo.Uint32(l.hdr[4:8]))
	if length < uint64(need) {
		return false, fmt.Errorf("pcapng block type %#x: length %d shorter than its header", l.bo.Uint32(l.hdr[:4]), length)
	}
	if l.bo.Uint32(l.hdr[:4]) == ngBlockInterface {
		l.idbs++
		if l.idbs > l.max {
			return false, fmt.Errorf("pcapng section declares more than %d interfaces: refused, since each one is kept in memory (a capture has one per capture point)", l.max)
		}
	}
	l.left = length - uint64(need)
	return true, nil
}
