package oob

import (
	"bytes"
	"encoding/binary"
	"io"
	"math"
	"net"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPerftestRecordBytes(t *testing.T) {
	d := PerftestDest{OutReads: 1, QPN: 0x11, PSN: 0xabcdef, RKey: 0x1234, VAddr: 0x7f0000001000, GID: gid127002}
	noGID := AppendPerftestDest(nil, d, false)
	require.Len(t, noGID, KeyMsgSize)
	assert.Equal(t, "0000:0001:000011:abcdef:00001234:00007f0000001000:00000000\x00", string(noGID))
	withGID := AppendPerftestDest(nil, d, true)
	require.Len(t, withGID, KeyMsgSizeGID)
	assert.Equal(t, "0000:0001:000011:abcdef:00001234:00007f0000001000:"+
		"00:00:00:00:00:00:00:00:00:00:ff:ff:7f:00:00:02:00000000:\x00", string(withGID))

	got, err := ParsePerftestDest(withGID, true)
	require.NoError(t, err)
	assert.Equal(t, d, got)
	got, err = ParsePerftestDest(noGID, false)
	require.NoError(t, err)
	d.GID = [16]byte{}
	assert.Equal(t, d, got)

	_, err = ParsePerftestDest(noGID, true)
	assert.Error(t, err)
	_, err = ParsePerftestDest(withGID, false)
	assert.Error(t, err)
	_, err = ParsePerftestDest([]byte("0000:0001:000011:abcdef:00001234:00007f0000001000:0000000g"), false)
	assert.Error(t, err)
}

// step is one move of a scripted peer: bytes it expects to read, or bytes
// it writes.
type step struct {
	expect []byte
	send   []byte
}

// scripted plays steps on conn and reports the first mismatch.
func scripted(conn net.Conn, steps []step) <-chan error {
	errc := make(chan error, 1)
	go func() {
		defer conn.Close()
		for _, s := range steps {
			if s.expect != nil {
				got := make([]byte, len(s.expect))
				if _, err := io.ReadFull(conn, got); err != nil {
					errc <- err
					return
				}
				if !bytes.Equal(got, s.expect) {
					errc <- &mismatch{got, s.expect}
					return
				}
			}
			if s.send != nil {
				if _, err := conn.Write(s.send); err != nil {
					errc <- err
					return
				}
			}
		}
		errc <- nil
	}()
	return errc
}

type mismatch struct{ got, want []byte }

func (m *mismatch) Error() string { return "got " + string(m.got) + " want " + string(m.want) }

func be32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func be64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }
func pad16(s string) []byte {
	b := make([]byte, 16)
	copy(b, s)
	return b
}

// TestPerftestClientBytes runs ib_write_bw's client sequence against a
// scripted server speaking perftest 6.06 and checks every byte the client
// sends.
func TestPerftestClientBytes(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	my := PerftestDest{OutReads: 1, QPN: 0x11, PSN: 0x222222, RKey: 0x3344, VAddr: 0x1000, GID: gid127002}
	srv := PerftestDest{OutReads: 1, QPN: 0x12, PSN: 0x333333, RKey: 0x5566, VAddr: 0x2000, GID: gid127002}
	myRep := BWReport{Size: 65536, Iters: 5000, BWPeak: 1234.5, BWAvg: 1200.25, MsgRate: 0.019204}
	srvRep := BWReport{Size: 65536, Iters: 5000}
	errc := scripted(s, []step{
		{expect: pad16("6.06"), send: pad16("6.06")},
		{expect: be32(4096), send: be32(8192)}, // cycle buffer
		{expect: be32(64), send: be32(64)},     // cache line
		{expect: []byte("3\x00"), send: []byte("5\x00")},
		{expect: AppendPerftestDest(nil, my, true), send: AppendPerftestDest(nil, srv, true)},
		{expect: be64(65536), send: be64(65536)},
		{expect: be64(5000), send: be64(5000)},
		{expect: be64(math.Float64bits(1234.5)), send: be64(0)},
		{expect: be64(math.Float64bits(1200.25)), send: be64(0)},
		{expect: be64(math.Float64bits(0.019204)), send: be64(0)},
		{expect: []byte("done\x00")},
	})
	p := &Perftest{RW: c, Client: true}
	require.NoError(t, p.ExchangeVersions(PerftestVersion))
	assert.Equal(t, "6.06", p.RemoteVersion)
	cb, cl, err := p.ExchangeSysData(4096, 64)
	require.NoError(t, err)
	assert.Equal(t, int32(8192), cb, "the larger cycle buffer wins")
	assert.Equal(t, int32(64), cl)
	mtu, err := p.ExchangeMTU(3)
	require.NoError(t, err)
	assert.Equal(t, 3, mtu, "the smaller MTU wins")
	rem, err := p.HandShake(my, true)
	require.NoError(t, err)
	assert.Equal(t, srv, rem)
	gotRep, err := p.ExchangeBWReports(myRep)
	require.NoError(t, err)
	assert.Equal(t, srvRep, gotRep)
	require.NoError(t, p.Done())
	require.NoError(t, <-errc)
}

// TestPerftestOldPeer checks the exchanges that depend on the peer's
// version: none of check_sys_data before 5.32, a 4-byte MTU before 5.31,
// 4-byte iteration counts before 5.33.
func TestPerftestOldPeer(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	errc := scripted(s, []step{
		{send: pad16("5.30")},
		{expect: pad16("6.06")},
		{send: []byte("2\x00\x00\x00")},
		{expect: []byte("3\x00\x00\x00")},
		{send: be64(2)},
		{expect: be64(2)},
		{send: be32(7)},
		{expect: be32(7)},
		{send: be64(math.Float64bits(1))},
		{expect: be64(math.Float64bits(1))},
		{send: be64(math.Float64bits(2))},
		{expect: be64(math.Float64bits(2))},
		{send: be64(math.Float64bits(3))},
		{expect: be64(math.Float64bits(3))},
	})
	p := &Perftest{RW: c}
	require.NoError(t, p.ExchangeVersions(PerftestVersion))
	cb, cl, err := p.ExchangeSysData(4096, 64)
	require.NoError(t, err)
	assert.Equal(t, []int32{4096, 64}, []int32{cb, cl})
	mtu, err := p.ExchangeMTU(3)
	require.NoError(t, err)
	assert.Equal(t, 2, mtu)
	rep := BWReport{Size: 2, Iters: 7, BWPeak: 1, BWAvg: 2, MsgRate: 3}
	got, err := p.ExchangeBWReports(rep)
	require.NoError(t, err)
	assert.Equal(t, rep, got)
	require.NoError(t, <-errc)
}

func TestVersionHelpers(t *testing.T) {
	assert.Equal(t, 6.06, atof("6.06"))
	assert.Equal(t, 5.3, atof("5.3x"))
	assert.Equal(t, 0.0, atof("abc"))
	assert.Equal(t, 1, versionCompare("6.06", "5.31"))
	assert.Equal(t, -1, versionCompare("5.4", "5.31"))
	assert.Equal(t, 0, versionCompare("5.1", "5.1"))
	assert.Equal(t, -1, versionCompare("", "5.1"))
}

func FuzzParsePerftestDest(f *testing.F) {
	f.Add(AppendPerftestDest(nil, PerftestDest{QPN: 1}, true), true)
	f.Add(AppendPerftestDest(nil, PerftestDest{QPN: 1}, false), false)
	f.Fuzz(func(t *testing.T, b []byte, gid bool) {
		d, err := ParsePerftestDest(b, gid)
		if err != nil {
			return
		}
		// What parses re-encodes to a record that parses the same.
		again, err := ParsePerftestDest(AppendPerftestDest(nil, d, gid), gid)
		require.NoError(t, err)
		require.Equal(t, d, again)
	})
}

func FuzzParsePingpong(f *testing.F) {
	f.Add(AppendPingpong(nil, PingpongDest{QPN: 1, GID: gid127002}))
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := ParsePingpong(b)
		if err != nil {
			return
		}
		again, err := ParsePingpong(AppendPingpong(nil, d))
		require.NoError(t, err)
		require.Equal(t, d, again)
	})
}
