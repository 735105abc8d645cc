package dropin

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/verbsapi"
)

// errnoOf gives the errno the kernel's verbs give for the same failure,
// however deeply the verbsapi error wraps its sentinel.
func TestErrnoOf(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("create qp 7: %w", err) }
	for _, tc := range []struct {
		err  error
		want syscall.Errno
	}{
		{nil, 0},
		{wrap(verbsapi.ErrBusy), syscall.EBUSY},
		{wrap(verbsapi.ErrLimit), syscall.ENOMEM},
		{wrap(verbsapi.ErrQueueFull), syscall.ENOMEM},
		{wrap(verbsapi.ErrNotSupported), syscall.EOPNOTSUPP},
		{wrap(verbsapi.ErrCQOverflow), syscall.EOVERFLOW},
		{wrap(verbsapi.ErrClosed), syscall.ENODEV},
		{wrap(syscall.EACCES), syscall.EACCES},
		{wrap(verbsapi.ErrInvalid), syscall.EINVAL},
		{errors.New("anything else"), syscall.EINVAL},
	} {
		assert.Equal(t, tc.want, errnoOf(tc.err), "%v", tc.err)
	}
}

// A refused request is logged with the op, the errno and the reason the
// verbs layer gave; a flood of them is rate-limited, with the count of the
// lines held back.
func TestRefusedRequestsLogged(t *testing.T) {
	var log logLines
	var lines []string
	sock := filepath.Join(t.TempDir(), "l.sock")
	d, err := startDaemonLog(linkFlags{Link: "mem", Addr: "10.0.0.9"}, "rxe9", sock, log.logf)
	require.NoError(t, err)
	defer d.Close()
	c := dialDaemon(t, sock)
	errno, _, _ := c.call(opDeallocPD, enc(wireHandle{42}))
	require.Equal(t, syscall.EINVAL, errno)
	errno, _, _ = c.call(opCreateCQ, enc(wireCreateCQ{CQE: 1 << 30, Channel: srNone}))
	require.NotZero(t, errno)
	for range 3 * logBurst {
		c.call(opDeallocPD, enc(wireHandle{42}))
	}
	lines = log.all()
	require.GreaterOrEqual(t, len(lines), 2)
	assert.Regexp(t, `^program pid \d+: SR_OP_DEALLOC_PD refused: invalid argument \(malformed or inconsistent request\)$`, lines[0])
	assert.Regexp(t, `^program pid \d+: SR_OP_CREATE_CQ refused: .*\(.*cq.*\)$`, lines[1])
	assert.LessOrEqual(t, len(lines), logBurst+1, "rate-limited")
}

func TestLogLimiter(t *testing.T) {
	var l logLimiter
	t0 := time.Unix(100, 0)
	for i := range logBurst {
		_, ok := l.allowAt(t0)
		require.True(t, ok, "line %d of the burst", i)
	}
	for range 7 {
		_, ok := l.allowAt(t0)
		require.False(t, ok)
	}
	n, ok := l.allowAt(t0.Add(time.Second / logRate))
	require.True(t, ok, "a token back after 1/logRate s")
	assert.EqualValues(t, 7, n, "the held-back lines, reported with the next")
}

// A refused call's answer carries the reason (flagged SR_REASON) for the
// library's SOFTROCE_DEBUG output; the errno is unchanged, and a refusal
// without more to say carries none.
func TestRefusalCarriesReason(t *testing.T) {
	_, sock := startTestDaemon(t, "10.0.0.9")
	c := dialDaemon(t, sock)
	errno, _, _ := c.call(opQueryPort, enc(wireQuery{0, 2, 0}))
	require.Equal(t, syscall.EINVAL, errno)
	assert.Equal(t, "query port 2: the device has port 1 only", c.reason)
	errno, _, _ = c.call(opCreateCQ, enc(wireCreateCQ{CQE: 1 << 30, Channel: srNone}))
	require.NotZero(t, errno)
	assert.Contains(t, c.reason, "cq")
	errno, _, _ = c.call(opDeallocPD, enc(wireHandle{42}))
	require.Equal(t, syscall.EINVAL, errno)
	assert.Empty(t, c.reason)
	// The connection is still in step after answers with reasons.
	var out wireDeviceAttr
	c.do(opQueryDevice, enc(wireQuery{}), &out)
}

// A QP moved to RTR toward an address nothing on the mem link owns is
// named in the log at once (its peer would only show as retries running
// out), as is one toward the device's own address and a QP number it does
// not have; one toward a QP of the device itself is not.
func TestUnreachablePeerLogged(t *testing.T) {
	var log logLines
	var lines []string
	sock := filepath.Join(t.TempDir(), "u.sock")
	d, err := startDaemonLog(linkFlags{Link: "mem", Addr: "10.0.0.9"}, "rxe9", sock, log.logf)
	require.NoError(t, err)
	defer d.Close()
	self := netip.MustParseAddr("::ffff:10.0.0.9").As16()
	a, b := connectedPrograms(t, sock, self)
	_ = b
	lines = log.all()
	require.Empty(t, lines, "the device's own GID is reachable")
	p := newProgram(t, sock, 0x7f0000300000)
	connectQP(t, p.testClient, p.qp.Handle, a.qp.QPNum, netip.MustParseAddr("::ffff:10.0.0.99").As16())
	// The device's own address, a QP number it does not have: a twin
	// device of the same address holds the peer.
	q := newProgram(t, sock, 0x7f0000400000)
	connectQP(t, q.testClient, q.qp.Handle, 0xABCDE, self)
	lines = log.all()
	require.Len(t, lines, 2)
	assert.Regexp(t, `^program pid \d+: QP \d+: nothing on rxe9's mem link has address 10\.0\.0\.99: its peer cannot answer\. .*--private.*--link udp$`, lines[0])
	assert.Regexp(t, `^program pid \d+: QP \d+: its destination 10\.0\.0\.9 is rxe9's own address, where no QP 703710 exists: .*--private`, lines[1])
}
