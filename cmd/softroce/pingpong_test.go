package main

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var (
	ppBytesLine = regexp.MustCompile(`(?m)^(\d+) bytes in ([0-9.]+) seconds = ([0-9.]+) Mbit/sec$`)
	ppItersLine = regexp.MustCompile(`(?m)^(\d+) iters in ([0-9.]+) seconds = ([0-9.]+) usec/iter$`)
	ppLocal     = regexp.MustCompile(`(?m)^  local address:  LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x[0-9a-f]{6}[,:] GID (\S+)$`)
	ppRemote    = regexp.MustCompile(`(?m)^  remote address: LID 0x0000, QPN 0x([0-9a-f]{6}), PSN 0x[0-9a-f]{6}, GID (\S+)$`)
)

// TestPingpongProcesses runs `softroce pingpong` as a server and a client
// process talking RoCE over UDP loopback, for each transport and a range of
// sizes, with the data check on, and checks both sides' reports.
func TestPingpongProcesses(t *testing.T) {
	bin := buildSoftroce(t)
	const srvAddr, cliAddr = "127.0.88.2", "127.0.88.3"
	tests := []struct {
		transport string
		size      int
		extra     []string
	}{
		{"rc", 1024, nil},
		{"rc", 4096, nil},
		{"rc", 1, []string{"-e"}},
		{"rc", 65536, []string{"-r", "8"}},
		{"uc", 1024, nil},
		{"uc", 4096, []string{"-e"}},
		{"uc", 1, nil},
		{"ud", 1024, nil},
		{"ud", 1, []string{"-e"}},
		{"ud", 0, nil}, // the default: the port's MTU
	}
	for i, tc := range tests {
		name := fmt.Sprintf("%s/%d/%v", tc.transport, tc.size, tc.extra)
		t.Run(name, func(t *testing.T) {
			port := strconv.Itoa(28600 + i)
			args := []string{"pingpong", "--transport", tc.transport, "-n", "50", "-c", "-p", port}
			if tc.size > 0 {
				args = append(args, "-s", strconv.Itoa(tc.size))
			}
			args = append(args, tc.extra...)
			srv, cli := runPeers(t, bin, 60*time.Second,
				append(append([]string{}, args...), "--addr", srvAddr),
				append(append([]string{}, args...), "--addr", cliAddr, srvAddr))
			require.Equal(t, 0, cli.code, "client: %s%s", cli.stdout, cli.stderr)
			require.Equal(t, 0, srv.code, "server: %s%s", srv.stdout, srv.stderr)
			size := tc.size
			if size == 0 {
				size = 1024 // min(2048, the 1024-byte active MTU of a 1500-byte link)
			}
			for _, side := range []struct {
				out, me, peer string
			}{{cli.stdout, cliAddr, srvAddr}, {srv.stdout, srvAddr, cliAddr}} {
				l := ppLocal.FindStringSubmatch(side.out)
				require.NotNil(t, l, side.out)
				assert.Equal(t, "::ffff:"+side.me, l[2])
				r := ppRemote.FindStringSubmatch(side.out)
				require.NotNil(t, r, side.out)
				assert.Equal(t, "::ffff:"+side.peer, r[2])
				b := ppBytesLine.FindStringSubmatch(side.out)
				require.NotNil(t, b, side.out)
				assert.Equal(t, strconv.Itoa(size*50*2), b[1], "bytes = size * iters * 2")
				it := ppItersLine.FindStringSubmatch(side.out)
				require.NotNil(t, it, side.out)
				assert.Equal(t, "50", it[1])
				usec, err := strconv.ParseFloat(it[3], 64)
				require.NoError(t, err)
				assert.Greater(t, usec, 0.0)
				assert.NotContains(t, side.out, "invalid data")
			}
			// Each side's remote QPN is the other's local QPN.
			assert.Equal(t, ppLocal.FindStringSubmatch(cli.stdout)[1], ppRemote.FindStringSubmatch(srv.stdout)[1])
			assert.Equal(t, ppLocal.FindStringSubmatch(srv.stdout)[1], ppRemote.FindStringSubmatch(cli.stdout)[1])
		})
	}
}

// TestPingpongCheckCatchesBadData runs a server with -c against a client
// without it: the client sends 0x7b everywhere, where -c wants 0 at the
// start of each page, so the server must report page 0 and fail, as
// ibv_rc_pingpong reports it.
func TestPingpongCheckCatchesBadData(t *testing.T) {
	bin := buildSoftroce(t)
	args := []string{"pingpong", "-n", "5", "-s", "64", "-p", "28650"}
	srv, cli := runPeers(t, bin, 60*time.Second,
		append(append([]string{}, args...), "-c", "--addr", "127.0.88.2"),
		append(append([]string{}, args...), "--addr", "127.0.88.3", "127.0.88.2"))
	assert.Equal(t, 0, cli.code, cli.stderr)
	assert.Equal(t, 1, srv.code, srv.stderr)
	assert.Contains(t, srv.stdout, "invalid data in page 0")
	assert.Contains(t, srv.stderr, "validation")
}

func TestPingpongUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"pingpong", "--transport", "xrc", "--addr", "127.0.88.2"},
		{"pingpong", "-m", "1000", "--addr", "127.0.88.2"},
		{"pingpong", "-n", "0", "--addr", "127.0.88.2"},
		{"pingpong", "a", "b"},
	} {
		code, _, stderr := runCmd(t, args...)
		assert.Equal(t, exitTrouble, code, "%v: %s", args, stderr)
	}
	// UD messages must fit the port MTU, as ibv_ud_pingpong requires.
	code, _, stderr := runCmd(t, "pingpong", "--transport", "ud", "-s", "2048", "--addr", "127.0.88.2", "-p", "28651")
	assert.Equal(t, exitTrouble, code)
	assert.Contains(t, stderr, "larger than port MTU (1024)")
}

// TestPingpongWire records the out-of-band exchange through a relay: the
// client's 52-byte record and "done", the server's record, nothing else.
func TestPingpongWire(t *testing.T) {
	bin := buildSoftroce(t)
	tap := newTCPTap(t, "127.0.88.2:28660")
	srv, cli := runPeers(t, bin, 60*time.Second,
		[]string{"pingpong", "-n", "10", "--addr", "127.0.88.2", "-p", "28660"},
		[]string{"pingpong", "-n", "10", "--addr", "127.0.88.3", "-p", tap.port(), "127.0.88.6"})
	require.Equal(t, 0, cli.code, "client: %s%s", cli.stdout, cli.stderr)
	require.Equal(t, 0, srv.code, "server: %s%s", srv.stdout, srv.stderr)
	<-tap.done
	up, down := tap.up.Bytes(), tap.down.Bytes()
	require.Len(t, up, 52+5)
	require.Len(t, down, 52)
	assert.Regexp(t, `^0000:[0-9a-f]{6}:[0-9a-f]{6}:00000000000000000000ffff7f005803\x00done\x00$`, string(up))
	assert.Regexp(t, `^0000:[0-9a-f]{6}:[0-9a-f]{6}:00000000000000000000ffff7f005802\x00$`, string(down))
	assert.Equal(t, ppLocal.FindStringSubmatch(cli.stdout)[1], string(up[5:11]), "the record carries the QPN printed")
}
