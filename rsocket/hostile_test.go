package rsocket

// hostile_test.go: peers that break the protocol. Each case connects a raw
// peer (a QP that speaks just enough rsocket to connect) to a listener,
// misbehaves, and checks that the victim connection fails with a clear
// error while an honest connection on the same devices keeps working.

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/verbsapi"
)

// rawPeer is an rsocket client made of parts: its connection data is
// honest, what it posts afterwards need not be.
type rawPeer struct {
	c    *Conn // its QP, buffers and CM connection; its goroutine never runs
	peer connData
	out  int // sends not yet completed
	once sync.Once
}

func dialRaw(t *testing.T, vc *verbsapi.Context, to netip.AddrPort) *rawPeer {
	t.Helper()
	c, err := newConn(vc, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cm, err := vc.DialCM(ctx, c.qp, to, &verbsapi.CMParam{PrivateData: c.connData()})
	require.NoError(t, err)
	peer, err := decodeConnData(cm.PrivateData)
	require.NoError(t, err)
	c.cm = cm
	p := &rawPeer{c: c, peer: peer}
	quit, answered := make(chan struct{}), make(chan struct{})
	go func() { // answer the victim's DREQ, as rdma_cm would
		defer close(answered)
		select {
		case <-cm.Done():
		case <-quit:
		}
		p.hangUp()
	}()
	t.Cleanup(func() { close(quit); <-answered; c.release() })
	return p
}

// hangUp disconnects (once: a CMConn takes one Disconnect at a time).
func (p *rawPeer) hangUp() { p.once.Do(func() { disconnect(p.c.cm) }) }

func (p *rawPeer) post(t *testing.T, wr verbsapi.SendWR) {
	t.Helper()
	require.NoError(t, p.c.qp.PostSend(&wr))
	p.out++
}

// reap takes the raw peer's completions until at most max sends are out.
func (p *rawPeer) reap(t *testing.T, max int) {
	wc := make([]verbsapi.WC, 64)
	for p.out > max {
		n, err := p.c.cq.Poll(wc)
		require.NoError(t, err)
		for _, w := range wc[:n] {
			if w.ID&recvID == 0 {
				p.out--
			}
		}
	}
}

// acceptOne dials the listener with f and returns the accepted side.
func acceptOne(t *testing.T, l *Listener, dial func()) *Conn {
	t.Helper()
	got := make(chan *Conn, 1)
	go func() {
		c, err := l.AcceptRsocket()
		if err == nil {
			got <- c
		}
	}()
	dial()
	select {
	case c := <-got:
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted")
		return nil
	}
}

func TestHostilePeers(t *testing.T) {
	a, b := pair(t)
	nextPort++
	port := nextPort
	l, err := Listen(a, port, nil)
	require.NoError(t, err)
	defer l.Close()
	to := netip.AddrPortFrom(netip.MustParseAddr("10.0.0.1"), port)

	// An honest pair, checked after every case.
	var honestCli *Conn
	honestSrv := acceptOne(t, l, func() {
		var err error
		honestCli, err = Dial(context.Background(), b, to, nil)
		require.NoError(t, err)
	})
	defer honestCli.Close()
	go io.Copy(honestSrv, honestSrv)
	roundTrip := func(t *testing.T) {
		t.Helper()
		require.NoError(t, honestCli.SetDeadline(time.Now().Add(5*time.Second)))
		msg := []byte("still here")
		_, err := honestCli.Write(msg)
		require.NoError(t, err)
		got := make([]byte, len(msg))
		_, err = io.ReadFull(honestCli, got)
		require.NoError(t, err)
		require.Equal(t, msg, got)
	}

	half := uint32(defaultBuf / 2)
	imm := func(m uint32) verbsapi.SendWR {
		return verbsapi.SendWR{ID: 1, Opcode: verbsapi.WRWriteImm, Imm: m}
	}
	cases := []struct {
		name string
		act  func(t *testing.T, p *rawPeer)
		// victim: what the accepted side sees (read: a Read fails with
		// want; write: a Write does).
		op   string
		want error
	}{
		{"data longer than its half", func(t *testing.T, p *rawPeer) { p.post(t, imm(msg(opData, half+1))) }, "read", ErrProtocol},
		{"unknown message type", func(t *testing.T, p *rawPeer) { p.post(t, imm(msg(1, 0))) }, "read", ErrProtocol},
		{"a send without an immediate", func(t *testing.T, p *rawPeer) {
			p.post(t, verbsapi.SendWR{ID: 1, Opcode: verbsapi.WRSend})
		}, "read", ErrProtocol},
		{"more messages than credits", func(t *testing.T, p *rawPeer) {
			// One more than the victim can queue: it reads only after.
			for range defaultQueue + 10 {
				p.post(t, imm(msg(opData, 1)))
				p.reap(t, defaultQueue-8)
			}
		}, "write", ErrProtocol}, // a read would take some and make room
		{"a bogus target and credits", func(t *testing.T, p *rawPeer) {
			// Grant everything, and point the victim's next target at
			// memory no region covers: its writes fail at our device.
			e := make([]byte, sgeLen)
			putSGE(e, sge{addr: 0xdead0000, key: 0x1234, length: 1 << 20}, binary.NativeEndian)
			p.post(t, verbsapi.SendWR{ID: 1, Opcode: verbsapi.WRWriteImm, Imm: msg(opSGL, 0xffff),
				Flags: verbsapi.SendInline, Inline: e, RemoteAddr: p.peer.targetSGL.addr + sgeLen, RKey: p.peer.targetSGL.key})
		}, "write", syscall.ECONNRESET},
		{"a write outside the advertised buffer", func(t *testing.T, p *rawPeer) {
			p.post(t, verbsapi.SendWR{ID: 1, Opcode: verbsapi.WRWriteImm, Imm: msg(opData, 8),
				Flags: verbsapi.SendInline, Inline: []byte("12345678"),
				RemoteAddr: p.peer.dataBuffer.addr + uint64(2*half), RKey: p.peer.dataBuffer.key})
		}, "read", nil},
		{"disconnect mid-stream", func(t *testing.T, p *rawPeer) {
			p.post(t, verbsapi.SendWR{ID: 1, Opcode: verbsapi.WRWriteImm, Imm: msg(opData, 4),
				Flags: verbsapi.SendInline, Inline: []byte("half"),
				RemoteAddr: p.peer.dataBuffer.addr, RKey: p.peer.dataBuffer.key})
			p.reap(t, 0) // delivered, then gone
			p.hangUp()
		}, "read", io.ErrUnexpectedEOF},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var p *rawPeer
			victim := acceptOne(t, l, func() { p = dialRaw(t, b, to) })
			tc.act(t, p)
			require.NoError(t, victim.SetDeadline(time.Now().Add(10*time.Second)))
			var err error
			switch tc.op {
			case "read":
				_, err = io.ReadFull(victim, make([]byte, 64))
			case "write":
				buf := make([]byte, 1<<16)
				for err == nil {
					_, err = victim.Write(buf)
				}
			}
			require.Error(t, err)
			require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "the victim never noticed: %v", err)
			if tc.want != nil {
				require.ErrorIs(t, err, tc.want)
			}
			roundTrip(t)
		})
	}
}
