package interop

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// testCMReject connects to an rdma_cm port nobody listens on, both ways
// (udp link): kernel rxe's CM must answer softroce's REQ with REJ "invalid
// service ID", and softroce's the kernel's, and each side must report it as
// its rdma_cm does.
func (s *suite) testCMReject(t *testing.T) {
	const port = 7999
	c := s.capture(t, "softroce_udp_cm_reject")
	ctx, cancel := context.WithTimeout(s.ctx, 60*time.Second)
	defer cancel()
	addr := s.net.Host.Addr().String()

	// softroce's REQ to the guest, where nothing listens on the port.
	var out bytes.Buffer
	cmd := s.net.Command(ctx, s.softroce, "rdmacm", "--link", "udp", "--addr", addr, "-p", strconv.Itoa(port), s.a.IP.String())
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "softroce rdmacm must fail:\n%s", out.String())
	require.Contains(t, out.String(), "invalid service ID", "softroce did not report kernel rxe's REJ:\n%s", out.String())

	// The guest's REQ to softroce, whose device listens on another port.
	srv := s.net.Command(ctx, s.softroce, "rdmacm", "--link", "udp", "--addr", addr)
	var sout bytes.Buffer
	srv.Stdout, srv.Stderr = &sout, &sout
	require.NoError(t, srv.Start())
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	time.Sleep(500 * time.Millisecond) // the device comes up; no port to watch
	r, err := s.a.Run(s.ctx, "rdma_client -s "+addr+" -p "+strconv.Itoa(port), 30*time.Second)
	require.NoError(t, err)
	require.NotEqual(t, 0, r.Status, "rdma_client must fail:\n%s", r.Output)
	require.Contains(t, r.Output, "rdma_connect: Connection refused", "the guest did not see softroce's REJ:\n%s", r.Output)
	s.checkCapture(t, c, 2)
}

// testCMRate connects 100 rdma_cm ids at once from softroce (Debian's cmtime
// on the drop-in library) to kernel rxe (cmtime in the guest) and back,
// and logs cmtime's table: connection setup across the two stacks, the
// README's figure.
func (s *suite) testCMRate(t *testing.T) {
	ctx, cancel := context.WithTimeout(s.ctx, 90*time.Second)
	defer cancel()
	job, err := s.a.Start(s.ctx, "cmtime -b "+s.a.IP.String(), 60*time.Second)
	require.NoError(t, err)
	defer job.Kill()
	r, err := s.a.Run(s.ctx, `for i in $(seq 200); do rdma res show cm_id 2>/dev/null | grep -Eq "LISTEN.*:7471( |$)" && exit 0; sleep 0.1; done; exit 1`, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, 0, r.Status, "cmtime never listened in the guest")
	var out bytes.Buffer
	cmd := s.net.Command(ctx, s.softroce, "run", "--link", "udp", "--addr", s.net.Host.Addr().String(),
		"--socket", filepath.Join(t.TempDir(), "none.sock"), "--lib", s.libDir, "--",
		"cmtime", "-s", s.a.IP.String(), "-c", "100")
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Run(), "cmtime on softroce:\n%s", out.String())
	require.Contains(t, out.String(), "connect", out.String())
	t.Logf("cmtime -c 100, softroce (drop-in) -> kernel rxe:\n%s", out.String())
}
