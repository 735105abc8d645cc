package replay

import (
	"path/filepath"
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
)

// FuzzOOBRecord: out-of-band records come from a capture, which is input:
// parsing never panics, and a record that parses reprints to itself.
func FuzzOOBRecord(f *testing.F) {
	f.Add([]byte("0000:000012:54b838:00000000000000000000ffff0a4d0003\x00"))
	f.Add([]byte("0000:0001:000011:327dc0:000002a3:0000555efdfd6000:00:00:00:00:00:00:00:00:00:00:ff:ff:0a:4d:00:03:00000000:\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if o, ok := ParseOOBRecord(b); ok && o.QPN > 0xFFFFFF {
			t.Fatalf("QPN %#x", o.QPN)
		}
		if o, ok := parsePerftestRecord(b); ok && (o.QPN > 0xFFFFFF || o.PSN > 0xFFFFFF) {
			t.Fatalf("%+v", o)
		}
		// As a TCP segment's payload in an IPv4 packet.
		ip := append([]byte{0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
			0x48, 0x53, 0x48, 0x53, 0, 0, 0, 0, 0, 0, 0, 0, 0x50, 0x18, 0, 0, 0, 0, 0, 0}, b...)
		ip[2], ip[3] = byte(len(ip)>>8), byte(len(ip))
		oobReader{}.segment(ip, 1)
		oobReader{}.segment(b, 1)
	})
}

// FuzzReplay replays captures with one frame's transport bytes overwritten
// (ICRC recomputed): a forged or corrupted capture must give a difference
// or an error, never a panic or a runaway allocation.
func FuzzReplay(f *testing.F) {
	files := []string{"rc_pingpong.pcap", "read.pcap", "atomic.pcap", "write.pcap", "ud_pingpong.pcap", "send.pcap"}
	var caps [][][]byte // per file, the Ethernet frames
	for _, name := range files {
		r, err := pcapio.Open(filepath.Join(rxeDir, name))
		if err != nil {
			f.Fatal(err)
		}
		var frames [][]byte
		for {
			rec, err := r.Next()
			if err != nil {
				break
			}
			var fr packet.Frame
			if packet.ParseFrame(rec.Data, &fr) == nil {
				frames = append(frames, append([]byte(nil), rec.Data...))
			}
		}
		r.Close()
		caps = append(caps, frames)
	}
	f.Add(uint8(0), uint16(3), uint16(4), []byte{0xff})              // BTH dest QP
	f.Add(uint8(1), uint16(1), uint16(12), []byte{0xff, 0xff, 0xff}) // RETH VA
	f.Add(uint8(1), uint16(1), uint16(24), []byte{0x7f, 0xff, 0xff, 0xff})
	f.Add(uint8(2), uint16(0), uint16(12), []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xf8})
	f.Add(uint8(4), uint16(2), uint16(0), []byte{0x0c})
	f.Fuzz(func(t *testing.T, file uint8, frame, off uint16, data []byte) {
		frames := caps[int(file)%len(caps)]
		c := &Capture{}
		target := int(frame) % len(frames)
		for i, d := range frames {
			d = append([]byte(nil), d...)
			var fr packet.Frame
			if err := packet.ParseFrame(d, &fr); err != nil {
				t.Fatal(err)
			}
			if i == target && int(off) < len(fr.Transport) {
				copy(fr.Transport[off:], data)
				packet.SetICRC(fr.IPUDP(), fr.Transport)
			}
			x := &Frame{No: i + 1, Data: d}
			if x.Pkt.Decode(fr.Transport) != nil {
				continue
			}
			a := fr.Addressing()
			x.Src, x.Dst, x.SrcPort, x.TTL, x.TOS = a.Src.Unmap(), a.Dst.Unmap(), a.SrcPort, a.HopLimit, a.TrafficClass
			copy(x.MAC[:], fr.Eth[6:12])
			c.Frames = append(c.Frames, x)
		}
		for _, fl := range c.Flows() {
			if fl.A.QPN > 4096 || fl.B.QPN > 4096 {
				// Reaching a large QPN takes a placeholder QP per
				// number (TestRunErrors covers the bounds): too slow
				// for fuzzing.
				continue
			}
			c.CheckOOB(fl)
			fl.Lossy()
			for _, s := range []Side{fl.A, fl.B} {
				for _, resp := range []bool{false, true} {
					if r, err := Run(fl, s.Addr, Options{Strict: true, ResponderOnly: resp}); err == nil {
						r.Err()
					}
				}
			}
		}
	})
}
