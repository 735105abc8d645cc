package verbsapi

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/rxe"
	"github.com/softroce/softroce/rxe/link"
)

// waitLimit bounds every blocking wait of the tests: a lost completion
// fails the test instead of hanging it. It is not a performance assertion.
const waitLimit = 10 * time.Second

// testHost is one side of a test connection.
type testHost struct {
	ctx      *Context
	pd       *PD
	scq, rcq *CQ
	qp       *QP
	mr       *MR
}

// hostOpts shapes a testHost.
type hostOpts struct {
	sendCQ, recvCQ int // CQ depths (0: 64)
}

// startPair starts two devices on a mem link with the real-time runtime.
func startPair(t *testing.T) (a, b *Context) { return startPairTB(t) }

// startPairTB is startPair for tests and benchmarks.
func startPairTB(t testing.TB) (a, b *Context) {
	t.Helper()
	la, lb := link.NewMemPair(1500)
	var ctxs [2]*Context
	for i, l := range []link.Link{la, lb} {
		d, err := rxe.New(rxe.Config{Name: fmt.Sprintf("rxe%d", i), Link: l,
			IPv4: netip.AddrFrom4([4]byte{10, 9, 0, byte(1 + i)})})
		require.NoError(t, err)
		require.NoError(t, d.Start())
		t.Cleanup(func() { d.Close() })
		ctxs[i] = OpenDevice(d)
	}
	return ctxs[0], ctxs[1]
}

// newHost creates a PD, CQs, an RC QP in RESET and a 4 KiB MR with every
// access on ctx.
func newHost(t *testing.T, ctx *Context, o hostOpts) *testHost { return newHostTB(t, ctx, o) }

// newHostTB is newHost for tests and benchmarks.
func newHostTB(t testing.TB, ctx *Context, o hostOpts) *testHost {
	t.Helper()
	h := &testHost{ctx: ctx}
	var err error
	h.pd, err = ctx.AllocPD()
	require.NoError(t, err)
	h.scq, err = ctx.CreateCQ(or(o.sendCQ, 64), nil)
	require.NoError(t, err)
	h.rcq, err = ctx.CreateCQ(or(o.recvCQ, 64), nil)
	require.NoError(t, err)
	h.qp, err = h.pd.CreateQP(QPInitAttr{SendCQ: h.scq, RecvCQ: h.rcq, QPType: RC,
		Cap: QPCap{MaxSendWR: 32, MaxRecvWR: 32, MaxSendSGE: 2, MaxRecvSGE: 2}})
	require.NoError(t, err)
	h.mr, err = h.pd.RegMR(make([]byte, 4096), AccessAll)
	require.NoError(t, err)
	return h
}

// connectHosts connects a's and b's QPs (RC, through RTS).
func connectHosts(t *testing.T, a, b *testHost, o *ConnOptions) {
	t.Helper()
	ea, err := a.qp.Endpoint(1, 0x100)
	require.NoError(t, err)
	eb, err := b.qp.Endpoint(1, 0x200)
	require.NoError(t, err)
	require.NoError(t, a.qp.Connect(ea.PSN, eb, o))
	require.NoError(t, b.qp.Connect(eb.PSN, ea, o))
}

// connectedHosts is startPair, newHost twice and connectHosts.
func connectedHosts(t *testing.T, oa, ob hostOpts) (a, b *testHost) {
	t.Helper()
	ca, cb := startPair(t)
	a, b = newHost(t, ca, oa), newHost(t, cb, ob)
	connectHosts(t, a, b, nil)
	return a, b
}

// next returns the next completion of cq, failing the test after waitLimit.
func next(t *testing.T, cq *CQ) WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	wc := make([]WC, 1)
	_, err := cq.PollWait(ctx, wc)
	require.NoError(t, err)
	return wc[0]
}

// nextEvent returns the next asynchronous event of ctx.
func nextEvent(t *testing.T, c *Context) AsyncEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	e, err := c.GetAsyncEvent(ctx)
	require.NoError(t, err)
	return e
}

// eventually waits until cond holds, failing after waitLimit.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	require.Eventually(t, cond, waitLimit, time.Millisecond, what)
}
