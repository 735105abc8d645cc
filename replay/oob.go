package replay

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// OOBPort is the TCP port of the out-of-band exchange of ibv_*_pingpong and
// perftest.
const OOBPort = 18515

// OOBRecord is one side's connection record, sent over TCP before the QPs
// connect: ibv_*_pingpong's "%04x:%06x:%06x:%032s" (LID, QPN, first PSN,
// GID) or perftest's RoCE key record, which adds the remote key and address
// of the sender's buffer.
type OOBRecord struct {
	No   int        // frame number
	From netip.Addr // the TCP sender
	LID  uint16
	QPN  uint32
	PSN  uint32
	GID  netip.Addr // unmapped when it is an IPv4-mapped address
	// Perftest records also carry the sender's buffer.
	Perftest bool
	RKey     uint32
	VA       uint64
}

func (o OOBRecord) String() string {
	s := fmt.Sprintf("#%d %s: lid %#04x qpn %#06x psn %#06x gid %s", o.No, o.From, o.LID, o.QPN, o.PSN, o.GID)
	if o.Perftest {
		s += fmt.Sprintf(" rkey %#x va %#x", o.RKey, o.VA)
	}
	return s
}

// oobReader finds pingpong records in TCP segments. Each record travels in
// one segment in practice (52 bytes); segments are not reassembled.
type oobReader struct{}

// segment parses ip as a TCP segment to or from OOBPort and its payload as a
// pingpong record.
func (oobReader) segment(ip []byte, no int) (OOBRecord, bool) {
	var src netip.Addr
	var tcp []byte
	switch {
	case len(ip) >= 20 && ip[0]>>4 == 4:
		hl := int(ip[0]&0xf) * 4
		tot := int(binary.BigEndian.Uint16(ip[2:4]))
		if ip[9] != 6 || hl < 20 || tot < hl || tot > len(ip) {
			return OOBRecord{}, false
		}
		src = netip.AddrFrom4([4]byte(ip[12:16]))
		tcp = ip[hl:tot]
	case len(ip) >= 40 && ip[0]>>4 == 6:
		pl := int(binary.BigEndian.Uint16(ip[4:6]))
		if ip[6] != 6 || 40+pl > len(ip) {
			return OOBRecord{}, false
		}
		src = netip.AddrFrom16([16]byte(ip[8:24])).Unmap()
		tcp = ip[40 : 40+pl]
	default:
		return OOBRecord{}, false
	}
	if len(tcp) < 20 {
		return OOBRecord{}, false
	}
	sport, dport := binary.BigEndian.Uint16(tcp[0:2]), binary.BigEndian.Uint16(tcp[2:4])
	off := int(tcp[12]>>4) * 4
	if (sport != OOBPort && dport != OOBPort) || off < 20 || off > len(tcp) {
		return OOBRecord{}, false
	}
	o, ok := ParseOOBRecord(tcp[off:])
	if !ok {
		o, ok = parsePerftestRecord(tcp[off:])
	}
	o.No, o.From = no, src
	return o, ok
}

// ParseOOBRecord parses an ibv_*_pingpong record: "%04x:%06x:%06x:%032s"
// (51 characters), optionally followed by its NUL.
func ParseOOBRecord(b []byte) (OOBRecord, bool) {
	if len(b) == 52 && b[51] == 0 {
		b = b[:51]
	}
	if len(b) != 51 || b[4] != ':' || b[11] != ':' || b[18] != ':' {
		return OOBRecord{}, false
	}
	lid, err1 := strconv.ParseUint(string(b[0:4]), 16, 16)
	qpn, err2 := strconv.ParseUint(string(b[5:11]), 16, 24)
	psn, err3 := strconv.ParseUint(string(b[12:18]), 16, 24)
	if err1 != nil || err2 != nil || err3 != nil {
		return OOBRecord{}, false
	}
	var gid [16]byte
	for i := range gid {
		v, err := strconv.ParseUint(string(b[19+2*i:21+2*i]), 16, 8)
		if err != nil {
			return OOBRecord{}, false
		}
		gid[i] = byte(v)
	}
	return OOBRecord{LID: uint16(lid), QPN: uint32(qpn), PSN: uint32(psn), GID: netip.AddrFrom16(gid).Unmap()}, true
}

// parsePerftestRecord parses perftest's key record with a GID (RoCE), 108
// bytes with its NUL: "%04x:%04x:%06x:%06x:%08x:%016x:" (LID, outstanding
// reads, QPN, PSN, rkey, address), the GID as sixteen "%02x:" and the SRQ
// number "%08x:".
func parsePerftestRecord(b []byte) (OOBRecord, bool) {
	if len(b) != 108 || b[107] != 0 {
		return OOBRecord{}, false
	}
	fields := strings.Split(string(b[:107]), ":")
	if len(fields) != 24 || fields[23] != "" {
		return OOBRecord{}, false
	}
	var v [23]uint64
	for i, f := range fields[:23] {
		bits := 8
		switch {
		case i < 6:
			bits = []int{16, 16, 24, 24, 32, 64}[i]
		case i == 22:
			bits = 32
		}
		n, err := strconv.ParseUint(f, 16, bits)
		if err != nil {
			return OOBRecord{}, false
		}
		v[i] = n
	}
	var gid [16]byte
	for i := range gid {
		gid[i] = byte(v[6+i])
	}
	return OOBRecord{LID: uint16(v[0]), QPN: uint32(v[2]), PSN: uint32(v[3]), RKey: uint32(v[4]), VA: v[5],
		GID: netip.AddrFrom16(gid).Unmap(), Perftest: true}, true
}
