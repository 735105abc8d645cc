package pcapio_test

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
	"github.com/gopacket/gopacket/pcapgo"
	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.UTC)

// roceFrame builds an Ethernet RC SEND ONLY frame with a right ICRC.
func roceFrame(t testing.TB, psn uint32, payload []byte) []byte {
	t.Helper()
	eth := packet.Ethernet{Dst: [6]byte{2, 0, 0, 0, 0, 2}, Src: [6]byte{2, 0, 0, 0, 0, 1}}
	a := packet.Addressing{
		Src: netip.MustParseAddr("10.0.0.1"), Dst: netip.MustParseAddr("10.0.0.2"),
		SrcPort: 49152, HopLimit: 64, DF: true,
	}
	p := packet.Packet{
		BTH:     packet.BTHFields{Opcode: packet.RCSendOnly, PKey: 0xFFFF, DestQP: 0x11, PSN: psn, AckReq: true},
		Payload: payload,
	}
	return packet.AppendFrame(nil, &eth, &a, &p)
}

type written struct {
	ts      time.Time
	data    []byte
	comment string
}

func samplePackets(t testing.TB) []written {
	return []written{
		{t0, roceFrame(t, 1, []byte("hello")), ""},
		{t0.Add(1500 * time.Nanosecond), roceFrame(t, 2, []byte("world!!")), "ICRC BAD"},
		{t0.Add(time.Second), roceFrame(t, 3, nil), "retransmit\nsecond line ✓"},
		{time.Unix(0, 0), roceFrame(t, 4, make([]byte, 1024)), ""}, // simulated clock at zero
	}
}

func writeAll(t testing.TB, w io.Writer, pkts []written) {
	t.Helper()
	pw, err := pcapio.NewWriter(w)
	require.NoError(t, err)
	for _, p := range pkts {
		require.NoError(t, pw.WritePacket(p.ts, p.data, p.comment))
	}
	require.NoError(t, pw.Close())
}

func readAll(t testing.TB, r *pcapio.Reader) []pcapio.Record {
	t.Helper()
	var out []pcapio.Record
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return out
		}
		require.NoError(t, err)
		rec.Data = append([]byte(nil), rec.Data...)
		out = append(out, rec)
	}
}

func TestWriteReadBackWithComments(t *testing.T) {
	pkts := samplePackets(t)
	path := filepath.Join(t.TempDir(), "x.pcapng")
	pw, err := pcapio.Create(path)
	require.NoError(t, err)
	for _, p := range pkts {
		require.NoError(t, pw.WritePacket(p.ts, p.data, p.comment))
	}
	require.NoError(t, pw.Close())
	require.ErrorIs(t, pw.Close(), pcapio.ErrClosed)
	require.ErrorIs(t, pw.WritePacket(t0, pkts[0].data, ""), pcapio.ErrClosed)

	r, err := pcapio.Open(path)
	require.NoError(t, err)
	defer r.Close()
	recs := readAll(t, r)
	require.Len(t, recs, len(pkts))
	for i, p := range pkts {
		rec := recs[i]
		assert.True(t, p.ts.Equal(rec.Time), "packet %d time %v want %v", i, rec.Time, p.ts)
		assert.Equal(t, p.data, rec.Data, "packet %d data", i)
		assert.Equal(t, len(p.data), rec.Length, "packet %d length", i)
		assert.Equal(t, p.comment, rec.Comment, "packet %d comment", i)
		assert.Equal(t, layers.LinkTypeEthernet, rec.LinkType)
		var f packet.Frame
		require.NoError(t, rec.Frame(&f), "packet %d", i)
		assert.True(t, f.ICRCOK(), "packet %d ICRC", i)
		var pk packet.Packet
		require.NoError(t, pk.Decode(f.Transport))
		assert.Equal(t, uint32(i+1), pk.BTH.PSN)
	}

	// gopacket's own pcapng reader agrees on the comments.
	fh, err := os.Open(path)
	require.NoError(t, err)
	defer fh.Close()
	ng, err := pcapgo.NewNgReader(fh, pcapgo.DefaultNgReaderOptions)
	require.NoError(t, err)
	assert.Equal(t, pcapio.Application, ng.SectionInfo().Application)
	assert.Empty(t, ng.SectionInfo().OS)
	assert.Empty(t, ng.SectionInfo().Hardware)
	for i, p := range pkts {
		_, _, opts, err := ng.ReadPacketDataWithOptions()
		require.NoError(t, err)
		if p.comment == "" {
			assert.Empty(t, opts.Comments, "packet %d", i)
		} else {
			assert.Equal(t, []string{p.comment}, opts.Comments, "packet %d", i)
		}
	}
}

// TestWriterBytes pins the exact bytes of a file: the section header must
// hold only the fixed application string, and an Enhanced Packet Block
// with a comment must be laid out as the pcapng spec says.
func TestWriterBytes(t *testing.T) {
	var buf bytes.Buffer
	data := []byte{1, 2, 3, 4, 5} // 5 bytes: 3 bytes of padding
	ts := time.Unix(0, 0x0000000100000002)
	writeAll(t, &buf, []written{{ts, data, "ICRC BAD"}})
	b := buf.Bytes()
	le := binary.LittleEndian

	u32 := func(v uint32) []byte { return le.AppendUint32(nil, v) }
	u16 := func(v uint16) []byte { return le.AppendUint16(nil, v) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

	shb := cat(u32(0x0A0D0D0A), u32(44), u32(0x1A2B3C4D), u16(1), u16(0),
		le.AppendUint64(nil, ^uint64(0)),
		u16(4), u16(8), []byte("softroce"), // shb_userappl
		u16(0), u16(0), // opt_endofopt
		u32(44))
	idb := cat(u32(1), u32(48), u16(1), u16(0), u32(0),
		u16(2), u16(9), []byte("softroce0"), []byte{0, 0, 0}, // if_name
		u16(9), u16(1), []byte{9, 0, 0, 0}, // if_tsresol = 9 (nanoseconds)
		u16(0), u16(0),
		u32(48))
	epb := cat(u32(6), u32(56), u32(0), u32(1), u32(2), u32(5), u32(5),
		data, []byte{0, 0, 0},
		u16(1), u16(8), []byte("ICRC BAD"), // opt_comment
		u16(0), u16(0),
		u32(56))
	require.Equal(t, cat(shb, idb, epb), b)
}

func TestWriterDeterministic(t *testing.T) {
	pkts := samplePackets(t)
	var a, b bytes.Buffer
	writeAll(t, &a, pkts)
	writeAll(t, &b, pkts)
	require.Equal(t, a.Bytes(), b.Bytes())
	for _, s := range []string{runtime.GOOS, runtime.GOARCH, "gopacket"} {
		assert.NotContains(t, a.String(), s, "host-specific string in the file")
	}
	assert.Contains(t, a.String(), pcapio.Application)
}

func TestWriterRejects(t *testing.T) {
	pw, err := pcapio.NewWriter(io.Discard)
	require.NoError(t, err)
	data := roceFrame(t, 1, nil)
	assert.Error(t, pw.WritePacket(time.Time{}, data, ""))
	assert.Error(t, pw.WritePacket(time.Unix(-1, 0), data, ""))
	assert.Error(t, pw.WritePacket(time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC), data, ""))
	assert.Error(t, pw.WritePacket(t0, data, strings.Repeat("x", 1<<16)))
	assert.NoError(t, pw.WritePacket(t0, data, strings.Repeat("x", 1<<16-1)))
}

func TestWriterConcurrent(t *testing.T) {
	var buf bytes.Buffer
	pw, err := pcapio.NewWriter(&buf)
	require.NoError(t, err)
	const writers, each = 4, 200
	var wg sync.WaitGroup
	for g := 0; g < writers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				psn := uint32(g*each + i)
				comment := ""
				if i%3 == 0 {
					comment = "c" + strconv.Itoa(int(psn))
				}
				if err := pw.WritePacket(t0.Add(time.Duration(psn)), roceFrame(t, psn, []byte{byte(g)}), comment); err != nil {
					t.Error(err)
					return
				}
				if i%50 == 0 {
					if err := pw.Flush(); err != nil {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, pw.Close())
	r, err := pcapio.NewReader(&buf)
	require.NoError(t, err)
	seen := map[uint32]bool{}
	for _, rec := range readAll(t, r) {
		var f packet.Frame
		require.NoError(t, rec.Frame(&f))
		require.True(t, f.ICRCOK())
		var p packet.Packet
		require.NoError(t, p.Decode(f.Transport))
		psn := p.BTH.PSN
		require.False(t, seen[psn], "psn %d twice", psn)
		seen[psn] = true
		assert.True(t, rec.Time.Equal(t0.Add(time.Duration(psn))))
		if psn%each%3 == 0 {
			assert.Equal(t, "c"+strconv.Itoa(int(psn)), rec.Comment)
		} else {
			assert.Empty(t, rec.Comment)
		}
	}
	require.Len(t, seen, writers*each)
}

// summaryCounts reads "file: N frames, M RoCEv2" lines of SUMMARY.txt.
func summaryCounts(t *testing.T, dir string) map[string][2]int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "SUMMARY.txt"))
	require.NoError(t, err)
	re := regexp.MustCompile(`(?m)^(\S+\.pcap): (\d+) frames, (\d+) RoCEv2, ICRC`)
	out := map[string][2]int{}
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		frames, _ := strconv.Atoi(m[2])
		roce, _ := strconv.Atoi(m[3])
		out[m[1]] = [2]int{frames, roce}
	}
	require.NotEmpty(t, out)
	return out
}

func TestReadRxeCaptures(t *testing.T) {
	dir := "../testdata/pcaps/rxe"
	want := summaryCounts(t, dir)
	files, err := filepath.Glob(filepath.Join(dir, "*.pcap"))
	require.NoError(t, err)
	require.Len(t, files, len(want))
	for _, name := range files {
		t.Run(filepath.Base(name), func(t *testing.T) {
			w, ok := want[filepath.Base(name)]
			require.True(t, ok, "not in SUMMARY.txt")
			r, err := pcapio.Open(name)
			require.NoError(t, err)
			defer r.Close()
			frames, roce := 0, 0
			var prev time.Time
			for {
				rec, err := r.Next()
				if err == io.EOF {
					break
				}
				require.NoError(t, err)
				frames++
				require.False(t, rec.Time.Before(prev), "frame %d goes back in time", frames)
				prev = rec.Time
				var f packet.Frame
				if rec.Frame(&f) != nil {
					continue
				}
				roce++
				require.True(t, f.ICRCOK(), "frame %d", frames)
				require.NotNil(t, f.Eth)
			}
			assert.Equal(t, w[0], frames, "frames")
			assert.Equal(t, w[1], roce, "RoCEv2 frames")
		})
	}
}

// TestReadFormats rewrites an rxe capture as nanosecond pcap, gzip pcap and
// pcapng and checks that every form reads back the same packets.
func TestReadFormats(t *testing.T) {
	src, err := pcapio.Open("../testdata/pcaps/rxe/atomic.pcap")
	require.NoError(t, err)
	orig := readAll(t, src)
	require.NoError(t, src.Close())
	require.NotEmpty(t, orig)

	var nano, gz, ng bytes.Buffer
	pw := pcapgo.NewWriterNanos(&nano)
	require.NoError(t, pw.WriteFileHeader(65535, layers.LinkTypeEthernet))
	for _, rec := range orig {
		ci := gopacket.CaptureInfo{Timestamp: rec.Time, CaptureLength: len(rec.Data), Length: rec.Length}
		require.NoError(t, pw.WritePacket(ci, rec.Data))
	}
	zw := gzip.NewWriter(&gz)
	_, err = zw.Write(nano.Bytes())
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	var pkts []written
	for _, rec := range orig {
		pkts = append(pkts, written{rec.Time, rec.Data, ""})
	}
	writeAll(t, &ng, pkts)

	for name, b := range map[string][]byte{"pcap-ns": nano.Bytes(), "pcap.gz": gz.Bytes(), "pcapng": ng.Bytes()} {
		t.Run(name, func(t *testing.T) {
			r, err := pcapio.NewReader(bytes.NewReader(b))
			require.NoError(t, err)
			got := readAll(t, r)
			require.Len(t, got, len(orig))
			for i := range orig {
				assert.True(t, orig[i].Time.Equal(got[i].Time), "packet %d", i)
				assert.Equal(t, orig[i].Data, got[i].Data, "packet %d", i)
				assert.Equal(t, layers.LinkTypeEthernet, got[i].LinkType)
			}
		})
	}
}

func TestReaderRejects(t *testing.T) {
	for name, b := range map[string][]byte{
		"empty":    nil,
		"short":    {0xd4, 0xc3},
		"text":     []byte("hello, world\n"),
		"pcap-hdr": {0xd4, 0xc3, 0xb2, 0xa1, 2, 0}, // right magic, header cut short
		"gzip-bad": {0x1f, 0x8b, 0, 0, 0},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := pcapio.NewReader(bytes.NewReader(b))
			require.Error(t, err)
		})
	}
	_, err := pcapio.NewReader(strings.NewReader("not a capture at all"))
	require.ErrorIs(t, err, pcapio.ErrUnknownFormat)
	_, err = pcapio.Open(filepath.Join(t.TempDir(), "missing.pcap"))
	require.ErrorIs(t, err, os.ErrNotExist)

	// A capture cut in the middle of a packet reports an error, not EOF.
	b, err := os.ReadFile("../testdata/pcaps/rxe/atomic.pcap")
	require.NoError(t, err)
	r, err := pcapio.NewReader(bytes.NewReader(b[:len(b)-7]))
	require.NoError(t, err)
	for {
		_, err = r.Next()
		if err != nil {
			break
		}
	}
	require.NotErrorIs(t, err, io.EOF)
}

// TestReadMixedLinkTypes reads a pcapng file with an Ethernet and a raw IP
// interface: each record carries its own interface's link type.
func TestReadMixedLinkTypes(t *testing.T) {
	var buf bytes.Buffer
	ng, err := pcapgo.NewNgWriterInterface(&buf, pcapgo.NgInterface{LinkType: layers.LinkTypeEthernet},
		pcapgo.NgWriterOptions{})
	require.NoError(t, err)
	rawID, err := ng.AddInterface(pcapgo.NgInterface{LinkType: layers.LinkTypeRaw})
	require.NoError(t, err)
	eth := roceFrame(t, 1, []byte("x"))
	ip := roceFrame(t, 2, []byte("y"))[packet.EthernetLen:]
	require.NoError(t, ng.WritePacket(gopacket.CaptureInfo{Timestamp: t0, CaptureLength: len(eth), Length: len(eth)}, eth))
	require.NoError(t, ng.WritePacket(gopacket.CaptureInfo{Timestamp: t0, CaptureLength: len(ip), Length: len(ip), InterfaceIndex: rawID}, ip))
	require.NoError(t, ng.Flush())

	r, err := pcapio.NewReader(&buf)
	require.NoError(t, err)
	recs := readAll(t, r)
	require.Len(t, recs, 2)
	for i, lt := range []layers.LinkType{layers.LinkTypeEthernet, layers.LinkTypeRaw} {
		assert.Equal(t, lt, recs[i].LinkType)
		var f packet.Frame
		require.NoError(t, recs[i].Frame(&f))
		var p packet.Packet
		require.NoError(t, p.Decode(f.Transport))
		assert.Equal(t, uint32(i+1), p.BTH.PSN)
	}
}

// TestRecordFrameLinkTypes checks that the IP header is found behind each
// link layer pcapio supports.
func TestRecordFrameLinkTypes(t *testing.T) {
	eth := roceFrame(t, 7, []byte("abc"))
	ip := eth[packet.EthernetLen:]
	withType := func(prefix []byte, et uint16) []byte {
		b := append([]byte(nil), prefix...)
		b = binary.BigEndian.AppendUint16(b, et)
		return append(b, ip...)
	}
	sll := withType(make([]byte, 14), packet.EtherTypeIPv4)
	sll2 := append(binary.BigEndian.AppendUint16(nil, packet.EtherTypeIPv4), make([]byte, 18)...)
	sll2 = append(sll2, ip...)
	vlan := withType(append(append([]byte(nil), eth[:12]...), 0x81, 0x00, 0, 5), packet.EtherTypeIPv4)
	qinq := withType(append(append([]byte(nil), eth[:12]...), 0x88, 0xa8, 0, 5, 0x81, 0x00, 0, 6), packet.EtherTypeIPv4)
	null := append([]byte{2, 0, 0, 0}, ip...)
	arp := withType(eth[:12], 0x0806)

	tests := []struct {
		name   string
		lt     layers.LinkType
		data   []byte
		ethLen int // expected len(f.Eth); -1: f.Eth nil
		err    error
	}{
		{"ethernet", layers.LinkTypeEthernet, eth, 14, nil},
		{"vlan", layers.LinkTypeEthernet, vlan, 18, nil},
		{"qinq", layers.LinkTypeEthernet, qinq, 22, nil},
		{"raw", layers.LinkTypeRaw, ip, -1, nil},
		{"ipv4", layers.LinkTypeIPv4, ip, -1, nil},
		{"sll", layers.LinkTypeLinuxSLL, sll, -1, nil},
		{"sll2", layers.LinkTypeLinuxSLL2, sll2, -1, nil},
		{"null", layers.LinkTypeNull, null, -1, nil},
		{"arp", layers.LinkTypeEthernet, arp, 0, packet.ErrNotIP},
		{"sll-arp", layers.LinkTypeLinuxSLL, withType(make([]byte, 14), 0x0806), 0, packet.ErrNotIP},
		{"sll-short", layers.LinkTypeLinuxSLL, make([]byte, 15), 0, packet.ErrTruncated},
		{"sll2-short", layers.LinkTypeLinuxSLL2, make([]byte, 19), 0, packet.ErrTruncated},
		{"eth-short", layers.LinkTypeEthernet, eth[:13], 0, packet.ErrTruncated},
		{"vlan-short", layers.LinkTypeEthernet, vlan[:15], 0, packet.ErrTruncated},
		{"null-short", layers.LinkTypeNull, null[:4], 0, packet.ErrTruncated},
		{"null-notip", layers.LinkTypeNull, []byte{2, 0, 0, 0, 0x10}, 0, packet.ErrNotIP},
		{"raw-empty", layers.LinkTypeRaw, nil, 0, packet.ErrTruncated},
		{"fddi", layers.LinkTypeFDDI, eth, 0, pcapio.ErrLinkType},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec := pcapio.Record{LinkType: tc.lt, Data: tc.data}
			var f packet.Frame
			err := rec.Frame(&f)
			if tc.err != nil {
				require.ErrorIs(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			if tc.ethLen < 0 {
				assert.Nil(t, f.Eth)
			} else {
				assert.Len(t, f.Eth, tc.ethLen)
			}
			assert.Equal(t, ip[:packet.IPv4Len], f.IP)
			assert.True(t, f.ICRCOK())
			got, err := rec.IP()
			require.NoError(t, err)
			assert.Equal(t, ip, got)
		})
	}
}

func BenchmarkReaderNext(b *testing.B) {
	data, err := os.ReadFile("../testdata/pcaps/rxe/loss.pcap")
	require.NoError(b, err)
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		r, err := pcapio.NewReader(bytes.NewReader(data))
		if err != nil {
			b.Fatal(err)
		}
		var f packet.Frame
		for {
			rec, err := r.Next()
			if err != nil {
				break
			}
			_ = rec.Frame(&f)
		}
	}
}

func BenchmarkWritePacket(b *testing.B) {
	pw, err := pcapio.NewWriter(io.Discard)
	require.NoError(b, err)
	data := roceFrame(b, 1, make([]byte, 1024))
	b.ReportAllocs()
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := pw.WritePacket(t0, data, ""); err != nil {
			b.Fatal(err)
		}
	}
}
