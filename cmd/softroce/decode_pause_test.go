package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
)

// TestDecodePause: decode names PFC PAUSE and XON frames (which tshark
// shows as "MAC CTRL ... CBFC Pause") and counts them as not RoCE.
func TestDecodePause(t *testing.T) {
	path := filepath.Join(t.TempDir(), "pause.pcapng")
	f, err := os.Create(path)
	require.NoError(t, err)
	w, err := pcapio.NewWriter(f)
	require.NoError(t, err)
	src := [6]byte{2, 0xFE, 0, 7, 0, 1}
	require.NoError(t, w.WritePacket(time.Unix(0, 1000), packet.AppendPause(nil, src, 3, 0xFFFF), ""))
	require.NoError(t, w.WritePacket(time.Unix(0, 2000), packet.AppendPause(nil, src, 3, 0), ""))
	require.NoError(t, w.Close())
	require.NoError(t, f.Close())

	code, out, _ := runCmd(t, "decode", path)
	require.Equal(t, 0, code, out)
	l := lines(out)
	require.Len(t, l, 3)
	assert.Equal(t, "1 0.000000000 02:fe:00:07:00:01 PAUSE prio3=65535", l[0])
	assert.Equal(t, "2 0.000001000 02:fe:00:07:00:01 PAUSE prio3=0", l[1])
	assert.Equal(t, "# total: frames=2 roce=0 good=0 bad=0 skipped=2", l[2])

	code, out, _ = runCmd(t, "decode", "--json", path)
	require.Equal(t, 0, code)
	assert.True(t, strings.HasPrefix(lines(out)[0], `{"type":"pause",`), out)
	assert.Contains(t, lines(out)[0], `"class_enable":8,"quanta":[0,0,0,65535,0,0,0,0]}`)
}
