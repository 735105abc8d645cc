package main

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/gopacket/gopacket/layers"
	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
	"github.com/spf13/cobra"
)

func init() { register(newDecodeCmd) }

const decodeLong = `Decode prints the RoCE v2 packets (UDP destination port 4791) of pcap and
pcapng capture files, one line per packet, and checks each packet's ICRC.
Other frames are counted, not printed. RoCE CM MADs (UD SEND to QP 1) are
RoCE packets like any other.

Text output, one line per RoCE packet:

  FRAME TIME SRC:SPORT -> DST OPCODE qpn=0x.. psn=N ackreq=0|1 [se] [fecn]
      [becn] [pkey=0x..] [ecn=ect0|ect1|ce] [header fields] len=N icrc=ok|BAD
      [note=...] [error="..."]

FRAME is the frame's number in the file counting every frame from 1 (as
Wireshark numbers them). TIME is seconds since the file's first frame, with
nanosecond digits. pkey is shown when it is not the default 0xffff, ecn
when the IP header's ECN field is not Not-ECT (ce: a switch marked it
congested). A congestion notification (BTH opcode 0x81, which tshark shows
as "Unknown OpCode") is named CNP, with becn set and len=16. The
header fields depend on the opcode: RETH va= rkey= dlen=; AETH syndrome=
msn=; AtomicETH va= rkey= swap= compare= (add= for FETCH_ADD); AtomicAckETH
orig=; DETH qkey= srcqp=; ImmDt imm=; IETH inv_rkey=; FETH sel= plt=.
len is the payload length without pad and ICRC. A packet that cannot be
decoded gets an error="..." field and only the fields that could be read.
A wrong IPv4 header or UDP checksum, which the ICRC does not cover, is not
an error: it is what a capture on a sending host with checksum offload
shows. Such a packet is decoded, judged by its ICRC, and noted
note=ipv4-checksum-bad(offload?) or note=udp-checksum-bad(offload?)
("bad_checksum": "ipv4" or "udp" in JSON).
With several files each file's packets follow a "# FILE" line and end with
a "# FILE: counts" line. The last line is always the total:

  # total: frames=N roce=N good=N bad=N skipped=N

roce = good + bad; skipped counts the frames that are not RoCE. A PFC
PAUSE frame (802.1Qbb, EtherType 0x8808), which a lossless RoCE network
sends beside RoCE, is printed but counted as skipped:

  FRAME TIME SRC-MAC PAUSE [prioN=QUANTA ...]

with each enabled priority's pause time in 512-bit-time quanta (0: XON);
in JSON a "pause" object with src, class_enable and quanta (eight
numbers).

With --json, every line is one JSON object whose "type" is "packet", "file"
(after each file's packets) or "summary" (the last line, on stdout).
Packet fields:
  file, frame, time (seconds since the first frame, number), ts (absolute,
  RFC 3339 UTC), src, sport, dst, dport, opcode (name), opcode_num, qpn,
  psn, ackreq, se, fecn, becn, pkey, ecn (only when not Not-ECT), len,
  icrc_ok, error (only when the
  packet cannot be decoded) and, by opcode: reth_va, reth_rkey, reth_len;
  syndrome (number), syndrome_str, msn; atomic_va, atomic_rkey, swap_add,
  compare (CMP_SWAP only); orig; qkey, src_qp; imm; inv_rkey; feth_sel,
  feth_plt.
  64-bit values (reth_va, atomic_va, swap_add, compare, orig) are strings
  "0x" + 16 hex digits, so that no JSON reader rounds them; all other
  numbers are JSON numbers.
File and summary fields: file (file objects only), files (summary only),
frames, roce, good, bad, skipped, error (file objects, when the file could
not be read to its end), unreadable (summary only: files with an error).

Exit status: 0 when every RoCE packet decodes and has a good ICRC; 1 when
any RoCE packet has a bad ICRC or cannot be decoded; 2 when a file cannot be
read or the command line is wrong.`

func newDecodeCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "decode FILE...",
		Short: "Print the RoCE v2 packets of capture files and check their ICRCs",
		Long:  decodeLong,
		Example: `  softroce decode testdata/pcaps/rxe/write.pcap
  softroce decode --json testdata/pcaps/rxe/*.pcap | jq 'select(.type=="packet" and .icrc_ok==false)'`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDecode(cmd.OutOrStdout(), cmd.ErrOrStderr(), args, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print one JSON object per line (fields in --help)")
	return cmd
}

// decodeCounts are the per-file and total tallies that decode reports.
type decodeCounts struct {
	frames, roce, good, bad, skipped int
}

func (c *decodeCounts) add(o decodeCounts) {
	c.frames += o.frames
	c.roce += o.roce
	c.good += o.good
	c.bad += o.bad
	c.skipped += o.skipped
}

// runDecode decodes files to stdout and returns an exitError with the
// status that decodeLong documents.
func runDecode(stdout, stderr io.Writer, files []string, asJSON bool) error {
	out := bufio.NewWriterSize(stdout, 64<<10)
	d := &decoder{out: out, json: asJSON, multi: len(files) > 1}
	var total decodeCounts
	unreadable := 0
	for _, name := range files {
		c, err := d.decodeFile(name)
		total.add(c)
		if err != nil {
			unreadable++
			// Keep stderr in step with stdout.
			if ferr := out.Flush(); ferr != nil {
				return exitError{exitTrouble, fmt.Errorf("write output: %w", ferr)}
			}
			fmt.Fprintf(stderr, "softroce decode: %v\n", err)
		}
	}
	d.summary(len(files), unreadable, total)
	if err := out.Flush(); err != nil {
		return exitError{exitTrouble, fmt.Errorf("write output: %w", err)}
	}
	switch {
	case unreadable > 0:
		return exitError{exitTrouble, fmt.Errorf("decode: %d of %d files could not be read", unreadable, len(files))}
	case total.bad > 0:
		return exitError{exitFailed, fmt.Errorf("decode: %d of %d RoCE packets bad", total.bad, total.roce)}
	}
	return nil
}

// decodeFile prints the packets of one capture and returns its counts. The
// error says why the file could not be read to its end.
func (d *decoder) decodeFile(name string) (decodeCounts, error) {
	var c decodeCounts
	d.startFile(name)
	r, err := pcapio.Open(name) // its errors name the file
	if err != nil {
		d.endFile(name, c, err)
		return c, err
	}
	defer r.Close()
	var first time.Time
	for {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			err = fmt.Errorf("%s: after frame %d: %w", name, c.frames, err)
			d.endFile(name, c, err)
			return c, err
		}
		c.frames++
		if c.frames == 1 {
			first = rec.Time
		}
		d.record(&rec, c.frames, rec.Time.Sub(first), &c)
	}
	d.endFile(name, c, nil)
	return c, nil
}

// record decodes and prints one captured frame, updating c.
func (d *decoder) record(rec *pcapio.Record, frame int, rel time.Duration, c *decodeCounts) {
	var f packet.Frame
	err := rec.Frame(&f)
	// A checksum the ICRC masks, wrong in the capture: most often the
	// sender's checksum offload, seen on the sending host before the NIC
	// filled it in. The packet is decoded and judged by its ICRC, with a
	// note saying which checksum it was.
	var csumNote error
	if errors.Is(err, packet.ErrIPChecksum) || errors.Is(err, packet.ErrUDPChecksum) {
		if rec.FrameUnverified(&f) == nil {
			csumNote, err = err, nil
		}
	}
	if err != nil {
		// A UDP datagram to port 4791 whose framing is broken is a bad
		// RoCE packet, not someone else's frame.
		ip, ipErr := rec.IP()
		if ipErr != nil {
			if en, times, ok := packet.ParsePause(rec.Data); ok && rec.LinkType == layers.LinkTypeEthernet {
				d.pause(frame, rel, rec.Time, rec.Data, en, &times)
			}
			c.skipped++
			return
		}
		u, ok := peekUDP(ip)
		if !ok || u.dport != packet.UDPPort {
			c.skipped++
			return
		}
		c.roce++
		c.bad++
		d.begin(frame, rel, rec.Time)
		d.addrs(u.src, u.sport, u.dst, u.dport)
		d.errField(err)
		d.end()
		return
	}
	c.roce++
	var p packet.Packet
	decErr := p.Decode(f.Transport)
	icrcOK := f.ICRCOK()
	if decErr == nil && icrcOK {
		c.good++
	} else {
		c.bad++
	}
	a := f.Addressing()
	d.begin(frame, rel, rec.Time)
	d.addrs(a.Src, a.SrcPort, a.Dst, a.DstPort)
	if len(f.Transport) >= packet.BTHLen {
		if decErr != nil {
			// Decode may stop before reading the BTH.
			p.BTH = packet.BTH(f.Transport).Fields()
		}
		d.bth(&p.BTH)
	}
	d.ecn(a.TrafficClass & 3)
	if decErr == nil {
		d.extHeaders(&p)
		d.uint("len", "len", uint64(len(p.Payload)))
		d.cm(&p)
	}
	d.icrc(icrcOK)
	if csumNote != nil {
		d.csumNote(csumNote)
	}
	if decErr != nil {
		d.errField(decErr)
	}
	d.end()
}

// extHeaders prints the extension headers the packet's opcode carries.
func (d *decoder) extHeaders(p *packet.Packet) {
	info := p.Info()
	if info.Is(packet.HdrFETH) {
		d.uint("sel", "feth_sel", uint64(p.FETH.Selectivity))
		d.uint("plt", "feth_plt", uint64(p.FETH.Placement))
	}
	if info.Is(packet.HdrDETH) {
		d.hex("qkey", "qkey", uint64(p.DETH.QKey), 8)
		d.hex("srcqp", "src_qp", uint64(p.DETH.SrcQP), 6)
	}
	if info.Is(packet.HdrRETH) {
		d.hex64("va", "reth_va", p.RETH.VA)
		d.hex("rkey", "reth_rkey", uint64(p.RETH.RKey), 8)
		d.uint("dlen", "reth_len", uint64(p.RETH.Length))
	}
	if info.Is(packet.HdrAtomicETH) {
		d.hex64("va", "atomic_va", p.AtomicETH.VA)
		d.hex("rkey", "atomic_rkey", uint64(p.AtomicETH.RKey), 8)
		if info.Kind == packet.KindFetchAdd {
			d.hex64("add", "swap_add", p.AtomicETH.SwapAdd)
		} else {
			d.hex64("swap", "swap_add", p.AtomicETH.SwapAdd)
			d.hex64("compare", "compare", p.AtomicETH.Compare)
		}
	}
	if info.Is(packet.HdrAETH) {
		d.syndrome(p.AETH.Syndrome)
		d.uint("msn", "msn", uint64(p.AETH.MSN))
	}
	if info.Is(packet.HdrAtomicAckETH) {
		d.hex64("orig", "orig", p.AtomicAck)
	}
	if info.Is(packet.HdrImmDt) {
		d.hex("imm", "imm", uint64(p.Imm), 8)
	}
	if info.Is(packet.HdrIETH) {
		d.hex("inv_rkey", "inv_rkey", uint64(p.IETH), 8)
	}
}

// udpPeek holds the UDP addressing read from an IP packet that packet.ParseIP
// rejected.
type udpPeek struct {
	src, dst     netip.Addr
	sport, dport uint16
}

// peekUDP reads the addresses and ports of a UDP datagram from an IP
// packet's first bytes, without the checks that packet.ParseIP makes (IP
// options and the first fragment are fine; lengths are not checked).
func peekUDP(ip []byte) (udpPeek, bool) {
	var u udpPeek
	if len(ip) == 0 {
		return u, false
	}
	var l4 []byte
	switch ip[0] >> 4 {
	case 4:
		ihl := int(ip[0]&0x0F) * 4
		if len(ip) < packet.IPv4Len || ihl < packet.IPv4Len || len(ip) < ihl+4 || ip[9] != 17 {
			return u, false
		}
		if binary.BigEndian.Uint16(ip[6:])&0x1FFF != 0 { // not the first fragment: no UDP header
			return u, false
		}
		u.src = netip.AddrFrom4([4]byte(ip[12:16]))
		u.dst = netip.AddrFrom4([4]byte(ip[16:20]))
		l4 = ip[ihl:]
	case 6:
		if len(ip) < packet.IPv6Len+4 || ip[6] != 17 {
			return u, false
		}
		u.src = netip.AddrFrom16([16]byte(ip[8:24]))
		u.dst = netip.AddrFrom16([16]byte(ip[24:40]))
		l4 = ip[packet.IPv6Len:]
	default:
		return u, false
	}
	u.sport, u.dport = binary.BigEndian.Uint16(l4), binary.BigEndian.Uint16(l4[2:])
	return u, true
}
