package dropin

import (
	"io"
	"net"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/rxe"
	"github.com/softroce/softroce/verbsapi"
)

// TestQueueMemoryLimits: a program asking for queues beyond its share of
// the daemon's memory gets ENOMEM with the cap named in the log, before
// anything is allocated (a QP at the device's maxima would take about
// 1.9 GB); programs together cannot pass the daemon's cap; what a program
// destroys or leaves behind is given back; and a connected pair on the
// same daemon keeps moving data throughout.
func TestQueueMemoryLimits(t *testing.T) {
	var log logLines
	var lines []string
	sock := filepath.Join(t.TempDir(), "q.sock")
	// Caps in CQs of the device's largest size: a program may hold four,
	// all programs six (and the small objects of each).
	cqe := rxe.MaxCQE
	per := verbsapi.CQQueueBytes(cqe)
	d, err := startDaemonWith(linkFlags{Link: "mem", Addr: "10.0.0.9"}, "rxe9", sock, func(s *Server) {
		s.MaxConnQueueBytes, s.MaxQueueBytes = 4*per+1<<20, 6*per+1<<20
		s.Logf = log.logf
	})
	require.NoError(t, err)
	defer d.Close()
	a, b := connectedPrograms(t, sock, gid1(t, d))
	write := func() {
		t.Helper()
		wc := a.writeTo(1, b.addr, b.mr.RKey, 0, 64)
		require.Zero(t, wc.Status, "the pair's WRITE")
	}
	write()
	pair := d.queueBytes.Load()

	hog := newProgram(t, sock, 0x7f0000500000)
	attr := d.ctx.QueryDevice()
	huge := wireCreateQP{PD: hog.pd, SendCQ: hog.cq, RecvCQ: hog.cq, SRQ: srNone, QPType: ibvQPTRC,
		Cap: wireQPCap{MaxSendWR: uint32(attr.MaxQPWR), MaxRecvWR: uint32(attr.MaxQPWR), MaxSendSGE: uint32(attr.MaxSGE),
			MaxRecvSGE: uint32(attr.MaxSGE), MaxInlineData: 0}}
	errno, _, _ := hog.call(opCreateQP, enc(huge))
	require.Equal(t, syscall.ENOMEM, errno, "a QP at the device's maxima: %v", lines)
	lines = log.all()
	require.NotEmpty(t, lines)
	assert.Regexp(t, `SR_OP_CREATE_QP refused: cannot allocate memory \(a QP of 1048576 WRs x 32 SGEs needs \d+ MiB of queue memory; this program has \d+ MiB of its \d+ MiB \(softroce daemon --max-program-queue-mem\)\)`, lines[len(lines)-1])
	write()

	// The hog takes CQs until its cap bites (at four), then a second hog
	// finds the daemon's cap spent (at two more).
	var cqs []uint32
	for {
		errno, body, _ := hog.call(opCreateCQ, enc(wireCreateCQ{CQE: uint32(cqe), Channel: srNone}))
		if errno != 0 {
			require.Equal(t, syscall.ENOMEM, errno)
			break
		}
		var r wireCQ
		require.True(t, decode(body, &r))
		cqs = append(cqs, r.Handle)
		require.Less(t, len(cqs), 5, "the program's cap never bit")
	}
	hog2 := newProgram(t, sock, 0x7f0000600000)
	n := 0
	for {
		errno, _, _ := hog2.call(opCreateCQ, enc(wireCreateCQ{CQE: uint32(cqe), Channel: srNone}))
		if errno != 0 {
			require.Equal(t, syscall.ENOMEM, errno)
			break
		}
		n++
		require.Less(t, n, 3, "the daemon's cap never bit")
	}
	require.Equal(t, []int{4, 2}, []int{len(cqs), n}, "CQs each hog got")
	lines = log.all()
	assert.Regexp(t, `all programs hold \d+ MiB of the daemon's \d+ MiB \(softroce daemon --max-queue-mem\)`, lines[len(lines)-1])
	write()

	// Destroying gives the memory back; so does a program's exit.
	for _, h := range cqs {
		errno, _, _ := hog.call(opDestroyCQ, enc(wireHandle{h}))
		require.Zero(t, errno)
	}
	errno, _, _ = hog2.call(opCreateCQ, enc(wireCreateCQ{CQE: uint32(cqe), Channel: srNone}))
	require.Zero(t, errno, "after the first hog destroyed its CQs")
	hog2.uc.Close()
	hog.uc.Close()
	require.Eventually(t, func() bool { return d.queueBytes.Load() == pair }, 5*time.Second, 10*time.Millisecond,
		"the hogs' queue memory outlived them")
	write()
}

// TestMaxConns: connections beyond the cap are closed at once and logged;
// the ones served keep working.
func TestMaxConns(t *testing.T) {
	var log logLines
	var lines []string
	sock := filepath.Join(t.TempDir(), "c.sock")
	d, err := startDaemonWith(linkFlags{Link: "mem", Addr: "10.0.0.9"}, "rxe9", sock, func(s *Server) {
		s.MaxConns = 2
		s.Logf = log.logf
	})
	require.NoError(t, err)
	defer d.Close()
	p1 := newProgram(t, sock, 0x7f0000100000)
	p2 := newProgram(t, sock, 0x7f0000200000)
	c3, err := net.Dial("unix", sock)
	require.NoError(t, err)
	defer c3.Close()
	require.NoError(t, c3.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = c3.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF, "the third connection was not closed")
	lines = log.all()
	require.NotEmpty(t, lines)
	assert.Contains(t, lines[len(lines)-1], "refused a connection: 2 programs' connections already (softroce daemon --max-conns)")
	for _, p := range []*program{p1, p2} {
		errno, _, _ := p.call(opAllocPD, nil)
		require.Zero(t, errno)
	}
}
