package pcapio

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
)

// Record is one captured packet.
type Record struct {
	Time     time.Time
	Data     []byte // the captured bytes; owned by the Reader, see Reader.Next
	LinkType layers.LinkType
	// Length is the packet's length on the wire; more than len(Data) when
	// the capture was cut at a snap length.
	Length int
	// Comment is the pcapng packet comment (several are joined by "\n");
	// empty for classic pcap.
	Comment string
}

// ErrUnknownFormat is returned by NewReader for input that is neither pcap
// nor pcapng.
var ErrUnknownFormat = errors.New("pcapio: not a pcap or pcapng file")

// File format magic numbers, as the first four bytes read little-endian.
const (
	magicPcapMicro   = 0xa1b2c3d4
	magicPcapNano    = 0xa1b23c4d
	magicPcapMicroBE = 0xd4c3b2a1
	magicPcapNanoBE  = 0x4d3cb2a1
	magicPcapng      = 0x0a0d0d0a // section header block type, palindromic
)

// Reader reads packets from a pcap or pcapng file.
type Reader struct {
	pcap   *pcapgo.Reader
	ng     *pcapgo.NgReader
	closer io.Closer // the file opened by Open, or nil
}

// Open opens a capture file for reading. Close the Reader when done.
func Open(path string) (*Reader, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	r, err := NewReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	r.closer = f
	return r, nil
}

// NewReader reads a capture from r, telling pcap from pcapng by the magic
// number at its start. gzip-compressed captures are decompressed.
func NewReader(r io.Reader) (*Reader, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	if head, _ := br.Peek(2); len(head) == 2 && head[0] == 0x1f && head[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		br = bufio.NewReaderSize(zr, 1<<16)
	}
	head, err := br.Peek(4)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, fmt.Errorf("%w: %w", ErrUnknownFormat, err)
	}
	switch binary.LittleEndian.Uint32(head) {
	case magicPcapMicro, magicPcapNano, magicPcapMicroBE, magicPcapNanoBE:
		pr, err := pcapgo.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("pcap header: %w", err)
		}
		return &Reader{pcap: pr}, nil
	case magicPcapng:
		nr, err := pcapgo.NewNgReader(newNgLimiter(br, MaxInterfaces), pcapgo.NgReaderOptions{WantMixedLinkType: true})
		if err != nil {
			return nil, fmt.Errorf("pcapng header: %w", err)
		}
		return &Reader{ng: nr}, nil
	}
	return nil, fmt.Errorf("%w: magic %02x", ErrUnknownFormat, head)
}

// Next returns the next packet, or io.EOF after the last one. Record.Data
// is owned by the Reader and overwritten by the next call, so that reading
// a large capture does not allocate per packet: copy it to keep it.
func (r *Reader) Next() (Record, error) {
	var (
		data []byte
		ci   gopacket.CaptureInfo
		err  error
		rec  Record
	)
	if r.pcap != nil {
		data, ci, err = r.pcap.ZeroCopyReadPacketData()
		rec.LinkType = r.pcap.LinkType()
	} else {
		var opts pcapgo.NgPacketOptions
		data, ci, opts, err = r.ng.ZeroCopyReadPacketDataWithOptions()
		if err == nil {
			intf, ierr := r.ng.Interface(ci.InterfaceIndex)
			if ierr != nil {
				return Record{}, fmt.Errorf("pcapng packet: %w", ierr)
			}
			rec.LinkType = intf.LinkType
			switch len(opts.Comments) {
			case 0:
			case 1:
				rec.Comment = opts.Comments[0]
			default:
				rec.Comment = strings.Join(opts.Comments, "\n")
			}
		}
	}
	if err != nil {
		if err == io.EOF {
			return Record{}, io.EOF
		}
		return Record{}, fmt.Errorf("read packet: %w", err)
	}
	rec.Time = ci.Timestamp
	rec.Data = data
	rec.Length = ci.Length
	return rec, nil
}

// Close closes the file that Open opened; it does nothing for NewReader.
func (r *Reader) Close() error {
	if r.closer == nil {
		return nil
	}
	return r.closer.Close()
}
