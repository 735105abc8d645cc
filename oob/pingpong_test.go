package oob

import (
	"net"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var gid127002 = netip.MustParseAddr("::ffff:127.0.0.2").As16()

func TestPingpongRecordBytes(t *testing.T) {
	tests := []struct {
		name string
		d    PingpongDest
		want string
	}{
		{"roce", PingpongDest{QPN: 0x11, PSN: 0x123456, GID: gid127002},
			"0000:000011:123456:00000000000000000000ffff7f000002\x00"},
		{"no gid", PingpongDest{LID: 0x1a, QPN: 0xfffffe, PSN: 1},
			"001a:fffffe:000001:00000000000000000000000000000000\x00"},
		{"ipv6", PingpongDest{QPN: 0x400, PSN: 0xabcdef, GID: netip.MustParseAddr("fe80::1:2").As16()},
			"0000:000400:abcdef:fe800000000000000000000000010002\x00"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := AppendPingpong(nil, tc.d)
			require.Len(t, b, PingpongRecordLen)
			assert.Equal(t, tc.want, string(b))
			got, err := ParsePingpong(b)
			require.NoError(t, err)
			assert.Equal(t, tc.d, got)
		})
	}
}

func TestParsePingpongRejects(t *testing.T) {
	for _, s := range []string{
		"",
		"0000:000011:123456",
		"0000:000011:123456:0000",
		"zzzz:000011:123456:00000000000000000000ffff7f000002",
		"0000:1000000:123456:00000000000000000000ffff7f000002",
		"0000:000011:123456:0000000000000000000gffff7f000002",
	} {
		_, err := ParsePingpong([]byte(s))
		assert.Error(t, err, "%q", s)
	}
}

// TestPingpongExchange runs both sides over a pipe and checks the bytes
// the client sends: its record, then "done".
func TestPingpongExchange(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	client := PingpongDest{QPN: 0x12, PSN: 0x1, GID: gid127002}
	server := PingpongDest{QPN: 0x13, PSN: 0xfff, GID: netip.MustParseAddr("::ffff:127.0.0.3").As16()}
	type result struct {
		d   PingpongDest
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, err := PingpongServerRead(s)
		if err == nil {
			err = PingpongServerReply(s, server)
		}
		done <- result{d, err}
	}()
	got, err := PingpongClient(c, client)
	require.NoError(t, err)
	assert.Equal(t, server, got)
	r := <-done
	require.NoError(t, r.err)
	assert.Equal(t, client, r.d)
	assert.Equal(t, "LID 0x0000, QPN 0x000012, PSN 0x000001, GID ::ffff:127.0.0.2", client.String())
}

func TestPingpongServerWantsDone(t *testing.T) {
	c, s := net.Pipe()
	defer s.Close()
	go func() {
		buf := make([]byte, PingpongRecordLen)
		_, _ = c.Read(buf)
		_, _ = c.Write([]byte("nope\x00"))
		c.Close()
	}()
	assert.ErrorContains(t, PingpongServerReply(s, PingpongDest{}), "done")
}
