package rsocket_test

import (
	"context"
	"fmt"
	"io"
	"net/netip"

	"github.com/softroce/softroce/rsocket"
	"github.com/softroce/softroce/verbsapi"
)

// Two devices on a mem link; a server on one echoes what a client on the
// other writes, over RC queue pairs. With udp links (verbsapi.LinkUDP) the
// peer may be another process, kernel rxe or an RNIC, and the C side
// anything using librdmacm's rsockets (rstream, librspreload.so).
func Example() {
	da, db, err := verbsapi.NewDevicePair("rxe0", "rxe1", verbsapi.LinkConfig{
		Kind: verbsapi.LinkMem, Addr: netip.MustParseAddrPort("10.0.0.1:4791")})
	if err != nil {
		panic(err)
	}
	defer da.Close()
	defer db.Close()
	a, _ := da.Open()
	b, _ := db.Open()

	l, err := rsocket.Listen(a, 7471, nil)
	if err != nil {
		panic(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c) // echo until the client shuts down its side
		c.(*rsocket.Conn).CloseWrite()
	}()

	c, err := rsocket.Dial(context.Background(), b, netip.MustParseAddrPort("10.0.0.1:7471"), nil)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	c.Write([]byte("hello over RDMA"))
	c.CloseWrite()
	reply, _ := io.ReadAll(c)
	fmt.Printf("%s (from %v)\n", reply, c.RemoteAddr())
	// Output: hello over RDMA (from 10.0.0.1:7471)
}
