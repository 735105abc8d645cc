package oob

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net/netip"
	"strconv"
	"strings"
)

// Sizes of perftest's key records (perftest_communication.h): without a GID
// (gid_index -1, InfiniBand) and with one (RoCE), NUL included.
const (
	KeyMsgSize    = 59
	KeyMsgSizeGID = 108
)

// PerftestVersionLen is the size of perftest's version field
// (char version[MAX_VERSION]): exchanged raw, NUL-padded.
const PerftestVersionLen = 16

// PerftestVersion is the perftest version whose protocol this package speaks
// (Debian 12's perftest 4.5+0.17 reports "6.06"). Sending it tells a real
// perftest to run every exchange the code here implements: check_sys_data
// (>= 5.32), the 2-byte MTU (>= 5.31) and 8-byte iteration counts (>= 5.33).
const PerftestVersion = "6.06"

// PerftestDest is struct pingpong_dest as ctx_hand_shake sends it.
type PerftestDest struct {
	LID      uint16
	OutReads uint16
	QPN      uint32
	PSN      uint32
	RKey     uint32
	VAddr    uint64
	GID      [16]byte
	SRQN     uint32
}

// GIDAddr returns the GID as an address (IPv4 GIDs as ::ffff:a.b.c.d).
func (d PerftestDest) GIDAddr() netip.Addr { return netip.AddrFrom16(d.GID) }

// AppendPerftestDest appends d's record as ethernet_write_keys writes it:
// KEY_PRINT_FMT (59 bytes) without a GID, KEY_PRINT_FMT_GID (108 bytes, the
// GID as 16 "%02x:") with one, NUL-terminated. Fields are masked to their
// printed widths so that the record keeps its size.
func AppendPerftestDest(dst []byte, d PerftestDest, withGID bool) []byte {
	start := len(dst)
	dst = fmt.Appendf(dst, "%04x:%04x:%06x:%06x:%08x:%016x:", d.LID, d.OutReads, d.QPN&0xffffff, d.PSN&0xffffff, d.RKey, d.VAddr)
	want := KeyMsgSize
	if withGID {
		for _, b := range d.GID {
			dst = fmt.Appendf(dst, "%02x:", b)
		}
		dst = fmt.Appendf(dst, "%08x:", d.SRQN)
		want = KeyMsgSizeGID
	} else {
		dst = fmt.Appendf(dst, "%08x", d.SRQN)
	}
	dst = append(dst, 0)
	if n := len(dst) - start; n != want {
		panic(fmt.Sprintf("oob: perftest record of %d bytes, want %d", n, want))
	}
	return dst
}

// ParsePerftestDest parses a record of either form (ethernet_read_keys).
func ParsePerftestDest(b []byte, withGID bool) (PerftestDest, error) {
	var d PerftestDest
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	s := string(b)
	fields := strings.Split(s, ":")
	want := 7
	if withGID {
		// 6 fields, 16 GID bytes, the SRQN and the empty tail after the
		// last colon.
		want = 6 + 16 + 2
		if len(fields) == want && fields[want-1] != "" {
			return d, fmt.Errorf("perftest record %q: text after the SRQN", s)
		}
	}
	if len(fields) != want {
		return d, fmt.Errorf("perftest record %q: %d fields, want %d", s, len(fields), want)
	}
	hex := func(i, bits int) (uint64, error) {
		v, err := strconv.ParseUint(fields[i], 16, bits)
		if err != nil {
			return 0, fmt.Errorf("perftest record %q: field %d: %w", s, i+1, err)
		}
		return v, nil
	}
	var vals [6]uint64
	for i, bits := range []int{16, 16, 24, 24, 32, 64} {
		v, err := hex(i, bits)
		if err != nil {
			return d, err
		}
		vals[i] = v
	}
	d.LID, d.OutReads, d.QPN, d.PSN, d.RKey, d.VAddr = uint16(vals[0]), uint16(vals[1]), uint32(vals[2]), uint32(vals[3]), uint32(vals[4]), vals[5]
	srqnField := 6
	if withGID {
		for i := range d.GID {
			v, err := hex(6+i, 8)
			if err != nil {
				return d, err
			}
			d.GID[i] = byte(v)
		}
		srqnField = 22
	}
	v, err := hex(srqnField, 32)
	if err != nil {
		return d, err
	}
	d.SRQN = uint32(v)
	return d, nil
}

// BWReport is struct bw_report_data as xchg_bw_reports exchanges it (without
// the per-port fields, which only --report-per-port sends).
type BWReport struct {
	Size    uint64
	Iters   uint64
	BWPeak  float64
	BWAvg   float64
	MsgRate float64
}

// Perftest runs perftest's out-of-band exchanges on one TCP connection,
// in the order and with the byte layouts of perftest_communication.c.
// Client says which side we are: the client writes first, the server
// reads first (ctx_xchg_data_ethernet).
type Perftest struct {
	RW     io.ReadWriter
	Client bool
	// RemoteVersion is the peer's version string, once ExchangeVersions ran.
	RemoteVersion string
}

// xchg writes mine and reads len(theirs) bytes, in the side's order.
func (p *Perftest) xchg(mine, theirs []byte) error {
	write := func() error {
		if _, err := p.RW.Write(mine); err != nil {
			return fmt.Errorf("write %d bytes: %w", len(mine), err)
		}
		return nil
	}
	read := func() error {
		if _, err := io.ReadFull(p.RW, theirs); err != nil {
			return fmt.Errorf("read %d bytes: %w", len(theirs), err)
		}
		return nil
	}
	if p.Client {
		if err := write(); err != nil {
			return err
		}
		return read()
	}
	if err := read(); err != nil {
		return err
	}
	return write()
}

// ExchangeVersions trades the 16-byte NUL-padded version strings
// (exchange_versions) and records the peer's.
func (p *Perftest) ExchangeVersions(mine string) error {
	var my, rem [PerftestVersionLen]byte
	copy(my[:PerftestVersionLen-1], mine)
	if err := p.xchg(my[:], rem[:]); err != nil {
		return fmt.Errorf("exchange versions: %w", err)
	}
	if i := bytes.IndexByte(rem[:], 0); i >= 0 {
		p.RemoteVersion = string(rem[:i])
	} else {
		p.RemoteVersion = string(rem[:])
	}
	return nil
}

// remoteAtLeast compares the peer's version as perftest does with atof.
func (p *Perftest) remoteAtLeast(v float64) bool { return atof(p.RemoteVersion) >= v }

// ExchangeSysData runs check_sys_data: when the peer is 5.32 or later, the
// cycle buffer and cache line size go each way as 4-byte big-endian ints,
// and each side uses the larger. It returns the values to use.
func (p *Perftest) ExchangeSysData(cycleBuffer, cacheLine int32) (int32, int32, error) {
	if !p.remoteAtLeast(5.32) {
		return cycleBuffer, cacheLine, nil
	}
	var my, rem [4]byte
	binary.BigEndian.PutUint32(my[:], uint32(cycleBuffer))
	if err := p.xchg(my[:], rem[:]); err != nil {
		return 0, 0, fmt.Errorf("exchange cycle buffer: %w", err)
	}
	rcb := int32(binary.BigEndian.Uint32(rem[:]))
	binary.BigEndian.PutUint32(my[:], uint32(cacheLine))
	if err := p.xchg(my[:], rem[:]); err != nil {
		return 0, 0, fmt.Errorf("exchange cache line size: %w", err)
	}
	rcl := int32(binary.BigEndian.Uint32(rem[:]))
	return max(cycleBuffer, rcb), max(cacheLine, rcl), nil
}

// ExchangeMTU runs check_mtu's exchange: the IB MTU enum (1 = 256 ... 5 =
// 4096) as sprintf("%d"), 2 bytes for peers 5.31 and later, 4 before, none
// before 5.1. It returns the smaller of ours and a valid remote one.
func (p *Perftest) ExchangeMTU(mtuEnum int) (int, error) {
	if versionCompare(p.RemoteVersion, "5.1") < 0 {
		return mtuEnum, nil
	}
	n := 4
	if versionCompare(p.RemoteVersion, "5.31") >= 0 {
		n = 2
	}
	my := make([]byte, n)
	copy(my[:n-1], strconv.Itoa(mtuEnum))
	rem := make([]byte, n)
	if err := p.xchg(my, rem); err != nil {
		return 0, fmt.Errorf("exchange MTU: %w", err)
	}
	r := leadingInt(rem)
	if r >= 1 && r <= 5 && r < mtuEnum {
		return r, nil
	}
	return mtuEnum, nil
}

// HandShake runs ctx_hand_shake: our record one way, the peer's the other.
// Later rounds serve as barriers; their content is the same.
func (p *Perftest) HandShake(my PerftestDest, withGID bool) (PerftestDest, error) {
	size := KeyMsgSize
	if withGID {
		size = KeyMsgSizeGID
	}
	rem := make([]byte, size)
	if err := p.xchg(AppendPerftestDest(make([]byte, 0, size), my, withGID), rem); err != nil {
		return PerftestDest{}, fmt.Errorf("hand shake: %w", err)
	}
	d, err := ParsePerftestDest(rem, withGID)
	if err != nil {
		return d, fmt.Errorf("hand shake: %w", err)
	}
	return d, nil
}

// ExchangeBWReports runs xchg_bw_reports: size (8 bytes), iterations (8
// bytes for peers 5.33 and later, else 4), then peak and average bandwidth
// and message rate as big-endian doubles, each field a separate exchange.
func (p *Perftest) ExchangeBWReports(my BWReport) (BWReport, error) {
	var rem BWReport
	var b8 [8]byte
	u64 := func(v uint64, n int) (uint64, error) {
		mine := make([]byte, n)
		if n == 8 {
			binary.BigEndian.PutUint64(mine, v)
		} else {
			binary.BigEndian.PutUint32(mine, uint32(v))
		}
		theirs := b8[:n]
		if err := p.xchg(mine, theirs); err != nil {
			return 0, err
		}
		if n == 8 {
			return binary.BigEndian.Uint64(theirs), nil
		}
		return uint64(binary.BigEndian.Uint32(theirs)), nil
	}
	var err error
	if rem.Size, err = u64(my.Size, 8); err != nil {
		return rem, fmt.Errorf("exchange bw report size: %w", err)
	}
	itersLen := 4
	if p.remoteAtLeast(5.33) {
		itersLen = 8
	}
	if rem.Iters, err = u64(my.Iters, itersLen); err != nil {
		return rem, fmt.Errorf("exchange bw report iterations: %w", err)
	}
	for _, f := range []struct {
		mine   float64
		theirs *float64
	}{{my.BWPeak, &rem.BWPeak}, {my.BWAvg, &rem.BWAvg}, {my.MsgRate, &rem.MsgRate}} {
		v, err := u64(math.Float64bits(f.mine), 8)
		if err != nil {
			return rem, fmt.Errorf("exchange bw report: %w", err)
		}
		*f.theirs = math.Float64frombits(v)
	}
	return rem, nil
}

// Done writes the "done" (NUL included) that ctx_close_connection sends
// after its last hand shake. Neither side reads it; the caller then closes
// the connection.
func (p *Perftest) Done() error {
	if _, err := p.RW.Write(pingpongDone); err != nil {
		return fmt.Errorf("write done: %w", err)
	}
	return nil
}

// atof is C's atof on a version string: the longest decimal prefix.
func atof(s string) float64 {
	end := 0
	dot := false
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.' && !dot) {
		if s[end] == '.' {
			dot = true
		}
		end++
	}
	v, err := strconv.ParseFloat(strings.TrimSuffix(s[:end], "."), 64)
	if err != nil {
		return 0
	}
	return v
}

// versionCompare compares dotted versions component by component as
// numbers, as strverscmp does for the version strings perftest uses.
func versionCompare(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(as), len(bs)); i++ {
		var x, y int
		if i < len(as) {
			x = leadingInt([]byte(as[i]))
		}
		if i < len(bs) {
			y = leadingInt([]byte(bs[i]))
		}
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	return 0
}

// leadingInt is strtol(s, NULL, 10) on the decimal digits at the start of b.
func leadingInt(b []byte) int {
	v := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			break
		}
		v = v*10 + int(c-'0')
	}
	return v
}
