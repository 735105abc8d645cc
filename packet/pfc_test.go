package packet_test

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/packet"
)

func TestPause(t *testing.T) {
	f := packet.AppendPause(nil, [6]byte{2, 0xFE, 0, 7, 0, 1}, 3, 0xFFFF)
	require.Len(t, f, packet.PauseLen)
	assert.Equal(t, []byte{0x01, 0x80, 0xC2, 0, 0, 1, 2, 0xFE, 0, 7, 0, 1, 0x88, 0x08, 0x01, 0x01, 0x00, 0x08}, f[:18])
	en, times, ok := packet.ParsePause(f)
	require.True(t, ok)
	assert.Equal(t, uint16(1<<3), en)
	assert.Equal(t, [8]uint16{3: 0xFFFF}, times)
	_, _, ok = packet.ParsePause(f[:20])
	assert.False(t, ok)
	xon := packet.AppendPause(nil, [6]byte{}, 3, 0)
	_, times, ok = packet.ParsePause(xon)
	assert.True(t, ok)
	assert.Zero(t, times[3])
}

func FuzzParsePause(f *testing.F) {
	f.Add(packet.AppendPause(nil, [6]byte{1}, 3, 7))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		en, times, ok := packet.ParsePause(b)
		if !ok {
			return
		}
		// Whatever parses is a 0x8808/0x0101 frame, read where 802.1Qbb
		// puts the fields.
		if binary.BigEndian.Uint16(b[12:]) != 0x8808 || en != binary.BigEndian.Uint16(b[16:]) ||
			times[7] != binary.BigEndian.Uint16(b[32:]) {
			t.Fatalf("parsed %x as enable %x times %v", b, en, times)
		}
	})
}
