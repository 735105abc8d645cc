package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var demoOps = []string{"RC SEND/RECV", "RC RDMA WRITE with imm", "RC RDMA READ",
	"RC ATOMIC CMP_AND_SWP", "RC ATOMIC FETCH_ADD", "UD SEND"}

// checkDemoReport checks the report lists every operation as ok and
// returns the capture's frame count.
func checkDemoReport(t *testing.T, out string) int {
	t.Helper()
	for _, op := range demoOps {
		assert.Regexp(t, `(?m)^  `+regexp.QuoteMeta(op)+` +ok +\d+ bytes`, out)
	}
	assert.NotContains(t, out, "FAILED")
	assert.Contains(t, out, "result: all 6 operations ok, every byte verified")
	for _, c := range []string{"sent_pkts", "rcvd_pkts", "retransmits", "naks_sent", "link: frames lost"} {
		assert.Regexp(t, `(?m)^  `+regexp.QuoteMeta(c)+` +\d+ +\d+$`, out)
	}
	m := regexp.MustCompile(`capture .*: (\d+) frames, (\d+) RoCE, (\d+) good, 0 bad`).FindStringSubmatch(out)
	require.NotNil(t, m, "capture line")
	frames, _ := strconv.Atoi(m[1])
	assert.Equal(t, m[1], m[2], "every frame is RoCE")
	assert.Equal(t, m[1], m[3], "every frame is good")
	return frames
}

// The demo succeeds over the default lossy link, and its capture decodes
// with no bad packet in softroce decode and, when installed, tshark.
func TestDemo(t *testing.T) {
	pcap := filepath.Join(t.TempDir(), "demo.pcapng")
	code, out, errOut := runCmd(t, "demo", "--pcap", pcap)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	t.Logf("demo output:\n%s", out)
	assert.Contains(t, out, "loss=2%,reorder=1%, seed 1, path MTU 1024")
	frames := checkDemoReport(t, out)
	assert.Greater(t, frames, 6*2)

	code, dec, decErr := runCmd(t, "decode", pcap)
	require.Equal(t, exitOK, code, "decode stderr: %s", decErr)
	n := strconv.Itoa(frames)
	assert.True(t, strings.HasSuffix(dec, "# total: frames="+n+" roce="+n+" good="+n+" bad=0 skipped=0\n"),
		"decode summary: %s", dec[strings.LastIndex(strings.TrimSpace(dec), "\n")+1:])
	for _, op := range []string{"RC_SEND_FIRST", "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", "RC_RDMA_READ_REQUEST",
		"RC_CMP_SWAP", "RC_FETCH_ADD", "RC_ATOMIC_ACKNOWLEDGE", "UD_SEND_ONLY", "RC_ACKNOWLEDGE"} {
		assert.True(t, strings.Contains(dec, " "+op+" "), "decode shows no %s", op)
	}

	tshark, err := exec.LookPath("tshark")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("tshark not installed (CI=true)")
		}
		t.Skip("tshark not installed")
	}
	cmd := exec.Command(tshark, "-r", pcap, "--disable-protocol", "rpcordma", "-T", "fields",
		"-e", "frame.number", "-e", "infiniband.bth.opcode", "-e", "frame.comment")
	b, err := cmd.Output()
	require.NoError(t, err, "tshark: %s", b)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, frames, "tshark reads every frame")
	for _, l := range lines {
		f := strings.Split(l, "\t")
		require.Len(t, f, 3, "line %q", l)
		assert.NotEmpty(t, f[1], "frame %s: tshark sees no BTH opcode", f[0])
		assert.Contains(t, []string{"out", "in"}, f[2], "frame %s comment", f[0])
	}
}

// Reliability holds under heavier loss and reordering with another seed.
func TestDemoHeavyFaults(t *testing.T) {
	pcap := filepath.Join(t.TempDir(), "heavy.pcapng")
	code, out, errOut := runCmd(t, "demo", "--pcap", pcap, "--loss", "10%", "--reorder", "10%", "--seed", "7", "--size", "16384")
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	checkDemoReport(t, out)
	assert.Regexp(t, `(?m)^  link: frames lost +\d+ +\d+$`, out)
	code, _, _ = runCmd(t, "decode", pcap)
	assert.Equal(t, exitOK, code)
}

// Without --pcap the capture goes to a new directory under os.TempDir,
// whose path the report prints.
func TestDemoDefaultPcap(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	code, out, errOut := runCmd(t, "demo", "--loss", "0", "--reorder", "0", "--size", "4096")
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "no faults")
	checkDemoReport(t, out)
	m := regexp.MustCompile(`capture (\S+): `).FindStringSubmatch(out)
	require.NotNil(t, m)
	assert.True(t, strings.HasPrefix(m[1], os.TempDir()), "%s not under %s", m[1], os.TempDir())
	assert.FileExists(t, m[1])
}

func TestDemoBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"demo", "--loss", "lots"},
		{"demo", "--reorder", "200%"},
		{"demo", "--size", "0"},
		{"demo", "extra-arg"},
	} {
		code, _, errOut := runCmd(t, args...)
		assert.Equal(t, exitTrouble, code, "%v", args)
		assert.NotEmpty(t, errOut, "%v", args)
	}
	code, _, errOut := runCmd(t, "demo", "--loss", "lots", "--pcap", filepath.Join(t.TempDir(), "x.pcapng"))
	assert.Equal(t, exitTrouble, code)
	assert.Contains(t, errOut, "loss")
}

// When the link loses everything, every operation fails, the report says
// so and the exit status is 1; the capture still holds good frames.
func TestDemoFailure(t *testing.T) {
	pcap := filepath.Join(t.TempDir(), "fail.pcapng")
	code, out, errOut := runCmd(t, "demo", "--pcap", pcap, "--loss", "100%", "--size", "4096")
	require.Equal(t, exitFailed, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	for _, op := range demoOps {
		assert.Regexp(t, `(?m)^  `+regexp.QuoteMeta(op)+` +FAILED `, out)
	}
	assert.Contains(t, out, "RDMA_WRITE completion 4: status WR_FLUSH_ERR")
	assert.Contains(t, out, "status RETRY_EXC_ERR")
	assert.Contains(t, out, "datagram lost 20 times")
	assert.Contains(t, out, "result: FAILED (6 of 6 operations failed, 0 bad frames)")
	assert.Regexp(t, `(?m)^  rcvd_pkts +0 +0$`, out)
	code, _, _ = runCmd(t, "decode", pcap)
	assert.Equal(t, exitOK, code, "lost frames were captured intact before the loss")
}
