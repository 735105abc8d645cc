package oob

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
)

// PingpongRecordLen is the size of the record ibv_*_pingpong exchange:
// sizeof "0000:000000:000000:" plus 32 hex digits of GID, with the NUL.
const PingpongRecordLen = 52

// pingpongDone is what the client writes once it has the server's record,
// NUL included, and what the server waits for before it starts the traffic.
var pingpongDone = []byte("done\x00")

// PingpongDest is what a pingpong side tells its peer: LID (0 on RoCE),
// QP number, first PSN and GID (all zeros when the tool runs without -g).
type PingpongDest struct {
	LID uint16
	QPN uint32
	PSN uint32
	GID [16]byte
}

// GIDAddr returns the GID as an address (IPv4 GIDs as ::ffff:a.b.c.d).
func (d PingpongDest) GIDAddr() netip.Addr { return netip.AddrFrom16(d.GID) }

// HasGID reports whether the GID is set. The C tools test the interface ID
// (the last 8 bytes), which is never zero for a populated RoCE GID.
func (d PingpongDest) HasGID() bool { return d.GID != [16]byte{} }

// String formats the destination as ibv_rc_pingpong prints it, after
// "local address:  " or "remote address: ".
func (d PingpongDest) String() string {
	return fmt.Sprintf("LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s", d.LID, d.QPN, d.PSN, d.GIDAddr())
}

// AppendPingpong appends d's 52-byte record: sprintf("%04x:%06x:%06x:%s")
// with the GID as gid_to_wire_gid writes it (four %08x of the big-endian
// 32-bit words, which is the 16 bytes in order), NUL-terminated. The QPN and
// PSN are masked to 24 bits so that the record keeps its size.
func AppendPingpong(dst []byte, d PingpongDest) []byte {
	start := len(dst)
	dst = fmt.Appendf(dst, "%04x:%06x:%06x:%x", d.LID, d.QPN&0xffffff, d.PSN&0xffffff, d.GID[:])
	dst = append(dst, 0)
	if n := len(dst) - start; n != PingpongRecordLen {
		panic(fmt.Sprintf("oob: pingpong record of %d bytes", n))
	}
	return dst
}

// ParsePingpong parses a record as sscanf("%x:%x:%x:%s") and
// wire_gid_to_gid do, but strictly: three hex fields and 32 hex digits of
// GID before the NUL (or the end of b).
func ParsePingpong(b []byte) (PingpongDest, error) {
	var d PingpongDest
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	fields := bytes.SplitN(b, []byte(":"), 4)
	if len(fields) != 4 {
		return d, fmt.Errorf("pingpong record %q: want lid:qpn:psn:gid", b)
	}
	var vals [3]uint64
	for i, bits := range []int{16, 24, 24} {
		v, err := strconv.ParseUint(string(fields[i]), 16, bits)
		if err != nil {
			return d, fmt.Errorf("pingpong record %q: field %d: %w", b, i+1, err)
		}
		vals[i] = v
	}
	d.LID, d.QPN, d.PSN = uint16(vals[0]), uint32(vals[1]), uint32(vals[2])
	gid := fields[3]
	if len(gid) != 32 {
		return d, fmt.Errorf("pingpong record %q: GID of %d hex digits, want 32", b, len(gid))
	}
	for i := range d.GID {
		v, err := strconv.ParseUint(string(gid[2*i:2*i+2]), 16, 8)
		if err != nil {
			return d, fmt.Errorf("pingpong record %q: GID: %w", b, err)
		}
		d.GID[i] = byte(v)
	}
	return d, nil
}

// PingpongClient runs the client's side of the exchange on rw: write our
// record, read the server's, write "done". The client connects its QP after
// this returns.
func PingpongClient(rw io.ReadWriter, my PingpongDest) (PingpongDest, error) {
	if _, err := rw.Write(AppendPingpong(nil, my)); err != nil {
		return PingpongDest{}, fmt.Errorf("send local address: %w", err)
	}
	rem, err := readPingpong(rw)
	if err != nil {
		return rem, err
	}
	if _, err := rw.Write(pingpongDone); err != nil {
		return rem, fmt.Errorf("send done: %w", err)
	}
	return rem, nil
}

// PingpongServerRead is the server's first step: read the client's record.
// The server then connects its QP (so that the client's first message finds
// it ready) and calls PingpongServerReply.
func PingpongServerRead(r io.Reader) (PingpongDest, error) { return readPingpong(r) }

// PingpongServerReply is the server's second step: write our record and wait
// for the client's "done".
func PingpongServerReply(rw io.ReadWriter, my PingpongDest) error {
	if _, err := rw.Write(AppendPingpong(nil, my)); err != nil {
		return fmt.Errorf("send local address: %w", err)
	}
	var done [5]byte
	if _, err := io.ReadFull(rw, done[:]); err != nil {
		return fmt.Errorf("read done: %w", err)
	}
	if !bytes.Equal(done[:], pingpongDone) {
		return fmt.Errorf("read done: got %q", done[:])
	}
	return nil
}

func readPingpong(r io.Reader) (PingpongDest, error) {
	var buf [PingpongRecordLen]byte
	if _, err := io.ReadFull(r, buf[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return PingpongDest{}, fmt.Errorf("read remote address: peer closed: %w", err)
		}
		return PingpongDest{}, fmt.Errorf("read remote address: %w", err)
	}
	return ParsePingpong(buf[:])
}
