package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
)

// offloadCapture copies write.pcap with the IPv4 header checksum of every
// RoCE frame zeroed, as a sending host with checksum offload captures its
// own frames, and the UDP checksum of one frame set to a wrong non-zero
// value. It returns the file, the number of RoCE frames and the frame whose
// UDP checksum is wrong.
func offloadCapture(t *testing.T) (path string, roce, udpBad int) {
	t.Helper()
	r, err := pcapio.Open(filepath.Join(rxeDir, "write.pcap"))
	require.NoError(t, err)
	defer r.Close()
	path = filepath.Join(t.TempDir(), "offload.pcapng")
	w, err := pcapio.Create(path)
	require.NoError(t, err)
	for frame := 1; ; frame++ {
		rec, err := r.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		rec.Data = append([]byte(nil), rec.Data...)
		var f packet.Frame
		if rec.Frame(&f) == nil && len(f.IP) == packet.IPv4Len {
			roce++
			if udpBad == 0 {
				binary.BigEndian.PutUint16(f.UDP[6:], 0x1234)
				udpBad = frame
			} else {
				binary.BigEndian.PutUint16(f.IP[10:], 0)
			}
		}
		require.NoError(t, w.WritePacket(rec.Time, rec.Data, ""))
	}
	require.NoError(t, w.Close())
	require.NotZero(t, roce)
	return path, roce, udpBad
}

// TestDecodeChecksumOffload: frames whose IPv4 or UDP checksum is wrong in
// the capture (checksum offload on the capturing sender) decode with their
// ICRC checked, which masks those fields, and a note naming the checksum;
// they are not counted bad.
func TestDecodeChecksumOffload(t *testing.T) {
	path, roce, udpBad := offloadCapture(t)
	code, out, errOut := runCmd(t, "decode", path)
	require.Equal(t, 0, code, "stderr: %s", errOut)
	ls := lines(out)
	notes := 0
	for _, l := range ls[:len(ls)-1] {
		_, kv := textFields(t, l)
		assert.Equal(t, "ok", kv["icrc"], l)
		assert.NotContains(t, kv, "error", l)
		if n := kv["note"]; n != "" {
			notes++
			want := "ipv4-checksum-bad(offload?)"
			if strings.HasPrefix(l, fmt.Sprint(udpBad)+" ") {
				want = "udp-checksum-bad(offload?)"
			}
			assert.Equal(t, want, n, l)
		}
	}
	assert.Equal(t, roce, notes)
	c := parseCounts(t, ls[len(ls)-1])
	assert.Equal(t, roce, c.good)
	assert.Zero(t, c.bad)

	_, out, _ = runCmd(t, "decode", "--json", path)
	kinds := map[string]int{}
	for _, o := range jsonLines(t, out) {
		if o["type"] == "packet" {
			assert.Equal(t, true, o["icrc_ok"])
			kinds[o["bad_checksum"].(string)]++
		}
	}
	assert.Equal(t, map[string]int{"ipv4": roce - 1, "udp": 1}, kinds)
}
