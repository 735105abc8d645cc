package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/softroce/softroce/packet"
)

// decoder formats decode's output. Each field is written by one method that
// knows both forms, text ("key=value") and JSON (`"key":value`), so the two
// outputs cannot drift apart. Lines are built in a reused buffer with
// strconv's Append functions: no allocation per packet.
type decoder struct {
	out   *bufio.Writer
	json  bool
	multi bool   // several files: text output gets per-file header and counts
	file  []byte // current file name, JSON-quoted
	b     []byte // the line being built
}

// syndromeNames and syndromeJSON cache packet.Syndrome's String (plain and
// JSON-quoted) for every byte value: String formats with fmt and would
// allocate per ACK.
var syndromeNames, syndromeJSON = func() (names [256]string, quoted [256][]byte) {
	for i := range names {
		names[i] = packet.Syndrome(i).String()
		quoted[i], _ = json.Marshal(names[i]) // a string always marshals
	}
	return names, quoted
}()

func (d *decoder) startFile(name string) {
	d.file, _ = json.Marshal(name) // a string always marshals
	if d.multi && !d.json {
		d.b = append(d.b[:0], "# "...)
		d.b = append(d.b, name...)
		d.b = append(d.b, '\n')
		d.out.Write(d.b)
	}
}

func (d *decoder) endFile(name string, c decodeCounts, err error) {
	if d.json {
		d.b = append(d.b[:0], `{"type":"file","file":`...)
		d.b = append(d.b, d.file...)
		d.b = appendCounts(d.b, c, true)
		if err != nil {
			d.b = append(d.b, `,"error":`...)
			d.b = appendJSONString(d.b, err.Error())
		}
		d.b = append(d.b, "}\n"...)
		d.out.Write(d.b)
		return
	}
	if d.multi {
		d.b = append(d.b[:0], "# "...)
		d.b = append(d.b, name...)
		d.b = append(d.b, ':')
		d.b = appendCounts(d.b, c, false)
		if err != nil {
			d.b = append(d.b, " error="...)
			d.b = strconv.AppendQuote(d.b, err.Error())
		}
		d.b = append(d.b, '\n')
		d.out.Write(d.b)
	}
}

func (d *decoder) summary(files, unreadable int, c decodeCounts) {
	if d.json {
		d.b = append(d.b[:0], `{"type":"summary","files":`...)
		d.b = strconv.AppendInt(d.b, int64(files), 10)
		d.b = appendCounts(d.b, c, true)
		d.b = append(d.b, `,"unreadable":`...)
		d.b = strconv.AppendInt(d.b, int64(unreadable), 10)
		d.b = append(d.b, "}\n"...)
	} else {
		d.b = append(d.b[:0], "# total:"...)
		d.b = appendCounts(d.b, c, false)
		d.b = append(d.b, '\n')
	}
	d.out.Write(d.b)
}

func appendCounts(b []byte, c decodeCounts, asJSON bool) []byte {
	for _, kv := range [...]struct {
		k string
		v int
	}{{"frames", c.frames}, {"roce", c.roce}, {"good", c.good}, {"bad", c.bad}, {"skipped", c.skipped}} {
		if asJSON {
			b = append(b, ',', '"')
			b = append(b, kv.k...)
			b = append(b, '"', ':')
		} else {
			b = append(b, ' ')
			b = append(b, kv.k...)
			b = append(b, '=')
		}
		b = strconv.AppendInt(b, int64(kv.v), 10)
	}
	return b
}

// begin starts a packet line with the frame number and times.
func (d *decoder) begin(frame int, rel time.Duration, ts time.Time) {
	d.beginType("packet", frame, rel, ts)
}

// beginType starts a line of JSON type typ ("packet", "pause").
func (d *decoder) beginType(typ string, frame int, rel time.Duration, ts time.Time) {
	b := d.b[:0]
	if d.json {
		b = append(b, `{"type":"`...)
		b = append(b, typ...)
		b = append(b, `","file":`...)
		b = append(b, d.file...)
		b = append(b, `,"frame":`...)
		b = strconv.AppendInt(b, int64(frame), 10)
		b = append(b, `,"time":`...)
		b = appendSeconds(b, rel)
		b = append(b, `,"ts":"`...)
		b = ts.UTC().AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	} else {
		b = strconv.AppendInt(b, int64(frame), 10)
		b = append(b, ' ')
		b = appendSeconds(b, rel)
	}
	d.b = b
}

// pause writes a PFC PAUSE frame's line.
func (d *decoder) pause(frame int, rel time.Duration, ts time.Time, f []byte, enable uint16, times *[8]uint16) {
	mac := net.HardwareAddr(f[6:12]).String()
	d.beginType("pause", frame, rel, ts)
	b := d.b
	if d.json {
		b = append(b, `,"src":"`...)
		b = append(b, mac...)
		b = append(b, `","class_enable":`...)
		b = strconv.AppendUint(b, uint64(enable), 10)
		b = append(b, `,"quanta":[`...)
		for i, q := range times {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(q), 10)
		}
		b = append(b, "]}\n"...)
	} else {
		b = append(b, ' ')
		b = append(b, mac...)
		b = append(b, " PAUSE"...)
		for i, q := range times {
			if enable&(1<<i) != 0 {
				b = append(b, " prio"...)
				b = strconv.AppendInt(b, int64(i), 10)
				b = append(b, '=')
				b = strconv.AppendUint(b, uint64(q), 10)
			}
		}
		b = append(b, '\n')
	}
	d.b = b
	d.out.Write(b)
}

// appendSeconds appends d as seconds with nine decimals.
func appendSeconds(b []byte, d time.Duration) []byte {
	if d < 0 {
		b = append(b, '-')
		d = -d
	}
	b = strconv.AppendInt(b, int64(d/time.Second), 10)
	ns := int64(d % time.Second)
	b = append(b, '.')
	for div := int64(100_000_000); div > 0; div /= 10 {
		b = append(b, byte('0'+ns/div%10))
	}
	return b
}

func (d *decoder) addrs(src netip.Addr, sport uint16, dst netip.Addr, dport uint16) {
	b := d.b
	if d.json {
		b = append(b, `,"src":"`...)
		b = src.AppendTo(b)
		b = append(b, `","sport":`...)
		b = strconv.AppendUint(b, uint64(sport), 10)
		b = append(b, `,"dst":"`...)
		b = dst.AppendTo(b)
		b = append(b, `","dport":`...)
		b = strconv.AppendUint(b, uint64(dport), 10)
	} else {
		b = append(b, ' ')
		b = appendHostPort(b, src, sport)
		b = append(b, " -> "...)
		b = dst.AppendTo(b)
	}
	d.b = b
}

func appendHostPort(b []byte, a netip.Addr, port uint16) []byte {
	if a.Is6() {
		b = append(b, '[')
		b = a.AppendTo(b)
		b = append(b, ']')
	} else {
		b = a.AppendTo(b)
	}
	b = append(b, ':')
	return strconv.AppendUint(b, uint64(port), 10)
}

func (d *decoder) bth(h *packet.BTHFields) {
	info := h.Opcode.Info()
	if d.json {
		d.b = append(d.b, `,"opcode":"`...)
		d.b = append(d.b, info.Name...)
		d.b = append(d.b, `","opcode_num":`...)
		d.b = strconv.AppendUint(d.b, uint64(h.Opcode), 10)
	} else {
		d.b = append(d.b, ' ')
		d.b = append(d.b, info.Name...)
		if !info.Valid {
			d.b = append(d.b, "(0x"...)
			d.b = appendHex(d.b, uint64(h.Opcode), 2)
			d.b = append(d.b, ')')
		}
	}
	d.hex("qpn", "qpn", uint64(h.DestQP), 6)
	d.uint("psn", "psn", uint64(h.PSN))
	d.boolNum("ackreq", "ackreq", h.AckReq)
	d.flag("se", "se", h.SE)
	d.flag("fecn", "fecn", h.FECN)
	d.flag("becn", "becn", h.BECN)
	if d.json || h.PKey != 0xFFFF {
		d.hex("pkey", "pkey", uint64(h.PKey), 4)
	}
}

// ecnNames are the ECN codepoints as decode writes them.
var ecnNames = [4]string{"", "ect1", "ect0", "ce"}

// ecn writes the IP header's ECN codepoint, when the packet is
// ECN-capable (a CE mark is what a notification point answers with a
// CNP); Not-ECT, what kernel rxe sends by default, writes nothing.
func (d *decoder) ecn(e uint8) {
	if e == packet.ECNNotECT {
		return
	}
	d.key("ecn", "ecn")
	if d.json {
		d.b = append(d.b, '"')
	}
	d.b = append(d.b, ecnNames[e&3]...)
	if d.json {
		d.b = append(d.b, '"')
	}
}

func (d *decoder) syndrome(s packet.Syndrome) {
	if d.json {
		d.uint("", "syndrome", uint64(s))
		d.b = append(d.b, `,"syndrome_str":`...)
		d.b = append(d.b, syndromeJSON[s]...)
		return
	}
	d.b = append(d.b, ` syndrome="`...)
	d.b = append(d.b, syndromeNames[s]...)
	d.b = append(d.b, '"')
}

func (d *decoder) icrc(ok bool) {
	if d.json {
		d.flag("", "icrc_ok", ok)
	} else if ok {
		d.b = append(d.b, " icrc=ok"...)
	} else {
		d.b = append(d.b, " icrc=BAD"...)
	}
}

// csumNote says that a checksum the ICRC does not cover is wrong in the
// capture (checksum offload on the capturing sender, most likely): "ipv4" or
// "udp".
func (d *decoder) csumNote(err error) {
	which := "ipv4"
	if errors.Is(err, packet.ErrUDPChecksum) {
		which = "udp"
	}
	if d.json {
		d.b = append(d.b, `,"bad_checksum":"`...)
		d.b = append(d.b, which...)
		d.b = append(d.b, '"')
	} else {
		d.b = append(d.b, " note="...)
		d.b = append(d.b, which...)
		d.b = append(d.b, "-checksum-bad(offload?)"...)
	}
}

func (d *decoder) errField(err error) {
	if d.json {
		d.b = append(d.b, `,"error":`...)
		d.b = appendJSONString(d.b, err.Error())
	} else {
		d.b = append(d.b, " error="...)
		d.b = strconv.AppendQuote(d.b, err.Error())
	}
}

// end finishes the line and writes it out.
func (d *decoder) end() {
	if d.json {
		d.b = append(d.b, '}')
	}
	d.b = append(d.b, '\n')
	d.out.Write(d.b)
}

// key starts a field: " tk=" in text, `,"jk":` in JSON.
func (d *decoder) key(tk, jk string) {
	if d.json {
		d.b = append(d.b, ',', '"')
		d.b = append(d.b, jk...)
		d.b = append(d.b, '"', ':')
	} else {
		d.b = append(d.b, ' ')
		d.b = append(d.b, tk...)
		d.b = append(d.b, '=')
	}
}

// uint writes a decimal number.
func (d *decoder) uint(tk, jk string, v uint64) {
	d.key(tk, jk)
	d.b = strconv.AppendUint(d.b, v, 10)
}

// hex writes a value of at most 32 bits: 0x and digits hex digits in text,
// a number in JSON.
func (d *decoder) hex(tk, jk string, v uint64, digits int) {
	d.key(tk, jk)
	if d.json {
		d.b = strconv.AppendUint(d.b, v, 10)
		return
	}
	d.b = append(d.b, '0', 'x')
	d.b = appendHex(d.b, v, digits)
}

// hex64 writes a 64-bit value as 0x and 16 hex digits; in JSON as a string,
// since JSON numbers are doubles for most readers.
func (d *decoder) hex64(tk, jk string, v uint64) {
	d.key(tk, jk)
	if d.json {
		d.b = append(d.b, '"')
	}
	d.b = append(d.b, '0', 'x')
	d.b = appendHex(d.b, v, 16)
	if d.json {
		d.b = append(d.b, '"')
	}
}

// boolNum writes 0 or 1 in text and a JSON boolean.
func (d *decoder) boolNum(tk, jk string, v bool) {
	d.key(tk, jk)
	switch {
	case d.json:
		d.b = strconv.AppendBool(d.b, v)
	case v:
		d.b = append(d.b, '1')
	default:
		d.b = append(d.b, '0')
	}
}

// flag writes a bare word in text when v is set, and always a JSON boolean.
func (d *decoder) flag(tk, jk string, v bool) {
	if d.json {
		d.key(tk, jk)
		d.b = strconv.AppendBool(d.b, v)
	} else if v {
		d.b = append(d.b, ' ')
		d.b = append(d.b, tk...)
	}
}

const hexDigits = "0123456789abcdef"

// appendHex appends v as exactly digits lower-case hex digits (more if v
// needs them).
func appendHex(b []byte, v uint64, digits int) []byte {
	for v>>(4*digits) != 0 && digits < 16 {
		digits++
	}
	for i := digits - 1; i >= 0; i-- {
		b = append(b, hexDigits[v>>(4*i)&0xF])
	}
	return b
}

// appendJSONString appends s as a JSON string. Only file names and error
// messages go through it, so encoding/json's allocation is acceptable.
func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}
