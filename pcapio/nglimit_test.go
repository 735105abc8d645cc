package pcapio

import (
	"bytes"
	"encoding/binary"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ngInterfaceBlock is a minimal little-endian interface description block
// (Ethernet, no options): 20 bytes.
func ngInterfaceBlock() []byte {
	b := make([]byte, 20)
	binary.LittleEndian.PutUint32(b[0:], ngBlockInterface)
	binary.LittleEndian.PutUint32(b[4:], 20)
	binary.LittleEndian.PutUint16(b[8:], 1) // LINKTYPE_ETHERNET
	binary.LittleEndian.PutUint32(b[16:], 20)
	return b
}

// manyInterfaces is a pcapng file written by Writer (section, one
// interface, one packet) with n more interface blocks spliced in before its
// packet.
func manyInterfaces(t *testing.T, n int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	require.NoError(t, err)
	require.NoError(t, w.Flush())
	head := append([]byte(nil), buf.Bytes()...)
	require.NoError(t, w.WritePacket(time.Unix(1, 0), make([]byte, 60), ""))
	require.NoError(t, w.Flush())
	pkt := buf.Bytes()[len(head):]
	out := append([]byte(nil), head...)
	idb := ngInterfaceBlock()
	for range n {
		out = append(out, idb...)
	}
	return append(out, pkt...)
}

func TestReaderRefusesInterfaceFlood(t *testing.T) {
	for _, tc := range []struct {
		name  string
		extra int
		ok    bool
	}{
		{"one interface", 0, true},
		{"at the limit", MaxInterfaces - 1, true},
		{"one past the limit", MaxInterfaces, false},
		{"two million", 2_000_000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := manyInterfaces(t, tc.extra)
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			r, err := NewReader(bytes.NewReader(file))
			if err == nil {
				_, err = r.Next()
			}
			runtime.ReadMemStats(&after)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, "more than 65536 interfaces")
			// Bounded by the limit, not by the file: the 2-million-block
			// file used to cost 1.77 GB.
			require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(256<<20))
		})
	}
}

// TestNgLimiterPassesThrough reads a capture through the limiter one byte
// at a time, so headers split across reads are followed correctly.
func TestNgLimiterPassesThrough(t *testing.T) {
	file := manyInterfaces(t, 3)
	got, err := io.ReadAll(newNgLimiter(iotestOneByte{bytes.NewReader(file)}, 4))
	require.NoError(t, err)
	require.Equal(t, file, got)
	_, err = io.ReadAll(newNgLimiter(iotestOneByte{bytes.NewReader(file)}, 3))
	require.ErrorContains(t, err, "more than 3 interfaces")
}

type iotestOneByte struct{ r io.Reader }

func (o iotestOneByte) Read(p []byte) (int, error) {
	if len(p) > 1 {
		p = p[:1]
	}
	return o.r.Read(p)
}
