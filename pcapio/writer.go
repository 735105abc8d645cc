package pcapio

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Application is the only string the section header carries (shb_userappl).
const Application = "softroce"

// InterfaceName is the name of the single interface a Writer declares.
const InterfaceName = "softroce0"

// ErrClosed is returned by a Writer used after Close.
var ErrClosed = errors.New("pcapio: writer closed")

// The timestamps pcapng's unsigned nanosecond count and time.UnixNano agree on.
var (
	minTime = time.Unix(0, 0)
	maxTime = time.Unix(0, math.MaxInt64)
)

// maxCommentLen is the longest comment a pcapng option (16-bit length) holds.
const maxCommentLen = math.MaxUint16

// Writer writes Ethernet packets to a pcapng file. The file holds one
// section and one interface (LINKTYPE_ETHERNET, no snap length, if_tsresol 9:
// nanosecond timestamps), and no host-specific strings, so that its bytes
// depend only on what is written. It is safe for concurrent use: a device
// logs its inbound and outbound frames from different goroutines.
type Writer struct {
	mu      sync.Mutex
	ng      *pcapgo.NgWriter
	file    *os.File // set by Create, closed by Close
	closed  bool
	comment [1]string // reused so that a comment costs no slice allocation here
}

// Create creates (or truncates) the file at path and writes the pcapng
// headers to it.
func Create(path string) (*Writer, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	w, err := NewWriter(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	w.file = f
	return w, nil
}

// NewWriter writes the pcapng headers to w and returns a Writer that
// appends packets to it. Output is buffered: call Flush or Close.
func NewWriter(w io.Writer) (*Writer, error) {
	intf := pcapgo.NgInterface{
		Name:     InterfaceName,
		LinkType: layers.LinkTypeEthernet,
		// pcapgo always writes if_tsresol 9 (nanoseconds).
		TimestampResolution: 9,
	}
	opts := pcapgo.NgWriterOptions{SectionInfo: pcapgo.NgSectionInfo{Application: Application}}
	ng, err := pcapgo.NewNgWriterInterface(w, intf, opts)
	if err != nil {
		return nil, fmt.Errorf("write pcapng headers: %w", err)
	}
	return &Writer{ng: ng}, nil
}

// WritePacket appends one Ethernet frame captured at ts. ts is stored with
// nanosecond resolution and must lie in 1970..2262 (pcapng counts unsigned
// nanoseconds since the epoch; a simulated clock should start at the epoch
// or later). A non-empty comment is stored as the packet's opt_comment.
// data is not retained.
func (w *Writer) WritePacket(ts time.Time, data []byte, comment string) error {
	if ts.Before(minTime) || ts.After(maxTime) {
		return fmt.Errorf("pcapio: timestamp %v outside 1970..2262", ts)
	}
	if len(comment) > maxCommentLen {
		return fmt.Errorf("pcapio: comment of %d bytes exceeds %d", len(comment), maxCommentLen)
	}
	ci := gopacket.CaptureInfo{Timestamp: ts, CaptureLength: len(data), Length: len(data)}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	var opts pcapgo.NgPacketOptions
	if comment != "" {
		w.comment[0] = comment
		opts.Comments = w.comment[:]
	}
	if err := w.ng.WritePacketWithOptions(ci, data, opts); err != nil {
		return fmt.Errorf("write packet: %w", err)
	}
	return nil
}

// Flush writes buffered packets to the underlying writer.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	return w.ng.Flush()
}

// Close flushes and, for a Writer from Create, closes the file. A Writer
// from NewWriter leaves its io.Writer open. Later calls return ErrClosed.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	w.closed = true
	err := w.ng.Flush()
	if w.file != nil {
		if cerr := w.file.Close(); err == nil {
			err = cerr
		}
	}
	return err
}
