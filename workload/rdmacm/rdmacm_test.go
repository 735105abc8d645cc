package rdmacm_test

import (
	"bytes"
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/verbsapi"
	"github.com/softroce/softroce/workload/rdmacm"
)

// TestServerClient runs the two programs against each other on two
// devices joined by a mem link.
func TestServerClient(t *testing.T) {
	da, db, err := verbsapi.NewDevicePair("rxe0", "rxe1", verbsapi.LinkConfig{Kind: verbsapi.LinkMem,
		Addr: netip.MustParseAddrPort("10.5.0.1:0")})
	require.NoError(t, err)
	defer da.Close()
	defer db.Close()
	ca, err := da.Open()
	require.NoError(t, err)
	cb, err := db.Open()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	var sout, cout bytes.Buffer
	errc := make(chan error, 1)
	go func() { errc <- rdmacm.Server(ctx, cb, &sout, rdmacm.DefaultPort) }()
	to := netip.AddrPortFrom(netip.MustParseAddr("10.5.0.2"), rdmacm.DefaultPort)
	// The server may not listen yet: the client is refused with "invalid
	// service ID" then, as the C client would be; try again.
	var cerr error
	for i := 0; i < 50; i++ {
		cout.Reset()
		if cerr = rdmacm.Client(ctx, ca, &cout, to); cerr == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.NoError(t, cerr, cout.String())
	require.NoError(t, <-errc, sout.String())
	require.Equal(t, "rdma_client: start\nrdma_client: end 0\n", cout.String())
	require.Equal(t, "rdma_server: start\nrdma_server: end 0\n", sout.String())
}
