package dropin

import (
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/cm"
)

// fuzzCMOps are the connection manager's ops a fuzzed request byte picks.
var fuzzCMOps = []uint32{
	opCMCreateChannel, opCMDestroyChannel, opCMCreateID, opCMDestroyID, opCMBind, opCMResolveAddr,
	opCMResolveRoute, opCMQueryRoute, opCMListen, opCMConnect, opCMAccept, opCMReject, opCMDisconnect,
	opCMEstablish, opCMInitQPAttr, opCMGetEvent, opCMSetOption, opCMMigrate,
}

func fuzzCMRecord(op uint32, body []byte) []byte {
	i := 0
	for j, o := range fuzzCMOps {
		if o == op {
			i = j
		}
	}
	return append([]byte{byte(i), byte(len(body))}, body...)
}

// FuzzDaemonCMCalls feeds a program's rdma_cm calls in arbitrary sequences,
// against a device that connects to itself: no call may panic, and when the
// program is gone it holds no id, listener or port.
func FuzzDaemonCMCalls(f *testing.F) {
	own := wireSockaddr(netip.MustParseAddrPort("10.0.0.8:7471"))
	var seed []byte
	seed = append(seed, fuzzCMRecord(opCMCreateChannel, nil)...)
	seed = append(seed, fuzzCMRecord(opCMCreateID, enc(wireCMCreateID{Channel: 1, PS: psTCP, QPType: qpTypeRC}))...)
	seed = append(seed, fuzzCMRecord(opCMBind, enc(wireCMBind{ID: 2, Addr: own}))...)
	seed = append(seed, fuzzCMRecord(opCMListen, enc(wireCMListen{ID: 2}))...)
	seed = append(seed, fuzzCMRecord(opCMCreateID, enc(wireCMCreateID{Channel: 1, PS: psTCP, QPType: qpTypeRC}))...)
	seed = append(seed, fuzzCMRecord(opCMResolveAddr, enc(wireCMResolve{ID: 3, Dst: own}))...)
	seed = append(seed, fuzzCMRecord(opCMResolveRoute, enc(wireHandle{3}))...)
	seed = append(seed, fuzzCMRecord(opCMConnect, enc(wireCMConn{ID: 3, Param: wireCMConnParam{QPNum: 17}}))...)
	seed = append(seed, fuzzCMRecord(opCMGetEvent, enc(wireHandle{1}))...)
	seed = append(seed, fuzzCMRecord(opCMInitQPAttr, enc(wireCMInitQPAttr{ID: 3, QPState: ibvQPSRTR}))...)
	seed = append(seed, fuzzCMRecord(opCMAccept, enc(wireCMConn{ID: 4}))...)
	seed = append(seed, fuzzCMRecord(opCMDisconnect, enc(wireHandle{3}))...)
	f.Add(seed)
	f.Add([]byte{})

	d, err := startDaemon(linkFlags{Link: "mem", Addr: "10.0.0.8"}, "rxe8", filepath.Join(f.TempDir(), "f.sock"))
	require.NoError(f, err)
	f.Cleanup(func() { d.Close() })

	f.Fuzz(func(t *testing.T, in []byte) {
		c := newTestConn(d)
		for len(in) >= 2 {
			op := fuzzCMOps[int(in[0])%len(fuzzCMOps)]
			n := min(int(in[1]), len(in)-2)
			r := request{op: op, body: in[2 : 2+n]}
			in = in[2+n:]
			_, err := c.run(&r)
			require.NoError(t, err)
			if c.outFD >= 0 && !c.ownOut {
				c.outFD = -1 // the eventfd stays the channel's
			}
		}
		c.cleanup()
		if c.cm != nil {
			require.Empty(t, c.cm.ids)
		}
		// Every port is free again: a listener on each of the seeds' works.
		port := d.ctx.CMPort()
		for _, p := range []uint16{7471, 7174} {
			got, ok := port.BindPort(p)
			require.True(t, ok, "port %d still bound", p)
			port.ReleasePort(got)
		}
		d.ctx.CMPort().Do(func(m *cm.Manager, _ cm.Time) {})
	})
}
