package link

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/softroce/softroce/fault"
	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// rxeFrames returns every RoCE frame (with a right ICRC) of the rxe captures,
// as IP packets, split by IP version.
func rxeFrames(t *testing.T) (v4, v6 [][]byte) {
	t.Helper()
	paths, err := filepath.Glob("../../testdata/pcaps/rxe/*.pcap")
	require.NoError(t, err)
	require.NotEmpty(t, paths)
	for _, p := range paths {
		r, err := pcapio.Open(p)
		require.NoError(t, err)
		for {
			rec, err := r.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			require.NoError(t, err, p)
			var f packet.Frame
			if rec.Frame(&f) != nil || !f.ICRCOK() {
				continue
			}
			ip := bytes.Clone(f.IP[:len(f.IP)+len(f.UDP)+len(f.Transport)])
			if f.IsIPv4() {
				v4 = append(v4, ip)
			} else {
				v6 = append(v6, ip)
			}
		}
		r.Close()
	}
	return v4, v6
}

func TestCheckICRCUnknownIPIDRxeCaptures(t *testing.T) {
	v4, v6 := rxeFrames(t)
	require.Greater(t, len(v4), 100)
	nonZeroID := 0
	for i, ip := range v4 {
		var f packet.Frame
		require.NoError(t, packet.ParseIP(ip, &f))
		wantID := binary.BigEndian.Uint16(ip[4:])
		wantDF := ip[6]&0x40 != 0
		if wantID != 0 {
			nonZeroID++
		}
		clear(ip[4:8]) // what a UDP socket link rebuilds
		ipv4Fix(ip)
		if wantID != 0 || wantDF {
			require.False(t, f.ICRCOK(), "frame %d: the plain check must fail", i)
		}
		id, df, ok := packet.RecoverIPv4ID(&f)
		require.True(t, ok, "frame %d", i)
		assert.Equal(t, wantID, id, "frame %d", i)
		assert.Equal(t, wantDF, df, "frame %d", i)
		require.True(t, packet.CheckICRCUnknownIPID(&f))
	}
	assert.Greater(t, nonZeroID, 100, "the captures carry real IDs")
	for _, ip := range v6 {
		var f packet.Frame
		require.NoError(t, packet.ParseIP(ip, &f))
		require.True(t, packet.CheckICRCUnknownIPID(&f))
		ip[len(ip)-1] ^= 1
		require.False(t, packet.CheckICRCUnknownIPID(&f))
	}
}

func ipv4Fix(ip []byte) {
	clear(ip[10:12])
	binary.BigEndian.PutUint16(ip[10:], packet.IPv4HeaderChecksum(ip[:20]))
}

// icrcCovered reports whether bit i of an IPv4 RoCE packet (IP header
// onwards) is covered by the ICRC and not among the unknown ID/DF bits.
func icrcCovered(i int) bool {
	byteI, mask := i/8, byte(0x80>>(i%8))
	switch {
	case byteI == 1, byteI == 8, byteI == 10, byteI == 11: // TOS, TTL, checksum
		return false
	case byteI >= 4 && byteI <= 7: // ID, flags, fragment offset: rebuilt as zero
		return false
	case byteI == 26 || byteI == 27: // UDP checksum
		return false
	case byteI == 28+4: // BTH byte 4: FECN, BECN, reserved
		return false
	}
	_ = mask
	return true
}

// Flipped bits outside the unknown and masked fields are caught, except with
// the documented 2^-15 chance; near the ID (within the 32-bit burst CRC-32
// always detects) they always are.
func TestCheckICRCUnknownIPIDRejectsCorruption(t *testing.T) {
	v4, _ := rxeFrames(t)
	rnd := fault.NewRand(1)
	single, multi, falseAccept, singleAccept := 0, 0, 0, 0
	for k, orig := range v4 {
		if k%40 != 0 { // a sample keeps the test quick
			continue
		}
		ip := bytes.Clone(orig)
		clear(ip[4:8])
		ipv4Fix(ip)
		var f packet.Frame
		require.NoError(t, packet.ParseIP(ip, &f))
		require.True(t, packet.CheckICRCUnknownIPID(&f))
		nbits := len(ip) * 8
		for i := 0; i < nbits; i++ {
			if !icrcCovered(i) || (nbits > 2048 && rnd.IntN(nbits) > 2048) {
				continue
			}
			ip[i/8] ^= 0x80 >> (i % 8)
			require.False(t, f.ICRCOK(), "frame %d bit %d: exact check", k, i)
			if packet.CheckICRCUnknownIPID(&f) {
				singleAccept++
				// Then some ID explains the flip: the flip and the
				// recovered ID/DF bits form a CRC-32 codeword.
				_, _, ok := packet.RecoverIPv4ID(&f)
				require.True(t, ok)
			}
			ip[i/8] ^= 0x80 >> (i % 8)
			single++
		}
		for r := 0; r < 50; r++ {
			var flips []int
			for len(flips) < 2+rnd.IntN(6) {
				if i := rnd.IntN(nbits); icrcCovered(i) {
					flips = append(flips, i)
				}
			}
			fault.FlipBits(ip, flips)
			if packet.CheckICRCUnknownIPID(&f) {
				falseAccept++
			}
			fault.FlipBits(ip, flips)
			multi++
		}
	}
	t.Logf("%d single-bit corruptions checked, %d false accepts; %d multi-bit, %d false accepts",
		single, singleAccept, multi, falseAccept)
	assert.Greater(t, single, 10000)
	// 15 of 32 bits are verified: a corruption passes with probability
	// 2^-15, single-bit ones included (a far flip plus some ID bits can form
	// a CRC-32 codeword). Allow five times the expectation.
	assert.LessOrEqual(t, singleAccept, 1+5*single>>15)
	assert.LessOrEqual(t, falseAccept, 1+5*multi>>15)
}

func BenchmarkCheckICRCUnknownIPID(b *testing.B) {
	p := packet.Packet{Payload: make([]byte, 4096)}
	p.BTH = packet.BTHFields{Opcode: packet.RCSendOnly, PKey: 0xFFFF, DestQP: 0x11}
	a := packet.Addressing{Src: ip4a, Dst: ip4b, SrcPort: 0xC001, HopLimit: 64, DF: true, IPID: 0x1234}
	ip := packet.AppendIPPacket(nil, &a, &p)
	clear(ip[4:8])
	ipv4Fix(ip)
	var f packet.Frame
	require.NoError(b, packet.ParseIP(ip, &f))
	require.True(b, packet.CheckICRCUnknownIPID(&f))
	b.Run("exact", func(b *testing.B) {
		b.SetBytes(int64(len(ip)))
		for b.Loop() {
			f.ICRCOK()
		}
	})
	b.Run("unknown-id", func(b *testing.B) {
		b.SetBytes(int64(len(ip)))
		for b.Loop() {
			packet.CheckICRCUnknownIPID(&f)
		}
	})
}

// Errors within 14 bits after the DF bit, or in the ID's own bytes' other
// fields, form with the unknown bits a burst shorter than 33 bits, which
// CRC-32 always detects.
func TestCheckICRCUnknownIPIDNearBitsAlwaysCaught(t *testing.T) {
	v4, _ := rxeFrames(t)
	for k, orig := range v4 {
		ip := bytes.Clone(orig)
		clear(ip[4:8])
		ipv4Fix(ip)
		var f packet.Frame
		require.NoError(t, packet.ParseIP(ip, &f))
		// Bits 32..63 of the header are bytes 4..7; the unknowns span bits
		// 32..49, so a flip at bits 18..31 (total length) or 50..63 stays
		// within a 32-bit burst. Bytes 6/7's fragment bits are rebuilt as
		// zero, so test the total length bytes (2, 3) and byte 0's low bits.
		for _, i := range []int{18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31} {
			ip[i/8] ^= 0x80 >> (i % 8)
			require.False(t, packet.CheckICRCUnknownIPID(&f), "frame %d bit %d", k, i)
			ip[i/8] ^= 0x80 >> (i % 8)
		}
	}
}
