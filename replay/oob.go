package replay

import (
	"encoding/binary"
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/oob"
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
	if len(b) == oob.PingpongRecordLen-1 {
		b = append(b[:len(b):len(b)], 0)
	}
	d, err := oob.ParsePingpong(b)
	if err != nil {
		return OOBRecord{}, false
	}
	return OOBRecord{LID: d.LID, QPN: d.QPN, PSN: d.PSN, GID: netip.AddrFrom16(d.GID).Unmap()}, true
}

// parsePerftestRecord parses perftest's key record with a GID (RoCE): LID,
// outstanding reads, QPN, PSN, rkey, address, GID and SRQ number.
func parsePerftestRecord(b []byte) (OOBRecord, bool) {
	d, err := oob.ParsePerftestDest(b, true)
	if err != nil {
		return OOBRecord{}, false
	}
	return OOBRecord{LID: d.LID, QPN: d.QPN, PSN: d.PSN, RKey: d.RKey, VA: d.VAddr,
		GID: netip.AddrFrom16(d.GID).Unmap(), Perftest: true}, true
}
