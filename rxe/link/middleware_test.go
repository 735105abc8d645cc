package link

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/softroce/softroce/fault"
	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/pcapio"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeClock advances by a microsecond per reading.
func fakeClock() func() time.Time {
	t := time.Unix(1_000_000, 0)
	return func() time.Time {
		t = t.Add(time.Microsecond)
		return t
	}
}

func captureRun(t *testing.T) ([]byte, [][]byte) {
	var buf bytes.Buffer
	w, err := pcapio.NewWriter(&buf)
	require.NoError(t, err)
	clock := fakeClock()
	a0, b0 := NewMemPair(1500)
	a := Capture(a0, w, clock)
	b := Capture(b0, w, clock)
	var sent [][]byte
	for i := 0; i < 3; i++ {
		f := roceFrame(t, b.MAC(), a.MAC(), ip4a, ip4b, 50+i, uint32(i))
		sent = append(sent, f)
		_, err := a.Send([]Frame{{Data: f}})
		require.NoError(t, err)
	}
	got := recvN(t, b, 3)
	require.Equal(t, sent, got)
	require.NoError(t, w.Flush())
	require.NoError(t, a.Err())
	assert.Equal(t, []Counter{{"capture_out", 3}, {"capture_in", 0}, {"capture_errors", 0}}, Counters(a)[:3])
	assert.Equal(t, "mem_sent", Counters(a)[3].Name, "Counters walks into the wrapped link")
	return buf.Bytes(), sent
}

func TestCapture(t *testing.T) {
	file, sent := captureRun(t)
	r, err := pcapio.NewReader(bytes.NewReader(file))
	require.NoError(t, err)
	var recs []pcapio.Record
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		rec.Data = bytes.Clone(rec.Data)
		recs = append(recs, rec)
	}
	require.Len(t, recs, 6)
	for i := 0; i < 3; i++ {
		assert.Equal(t, "out", recs[i].Comment)
		assert.Equal(t, sent[i], recs[i].Data)
	}
	// recvN got all three in one Recv: same timestamp, after the sends.
	for i := 3; i < 6; i++ {
		assert.Equal(t, "in", recs[i].Comment)
		assert.Equal(t, sent[i-3], recs[i].Data)
		assert.True(t, time.Unix(1_000_000, 4000).Equal(recs[i].Time), "%v", recs[i].Time)
	}
	assert.True(t, time.Unix(1_000_000, 1000).Equal(recs[0].Time))

	again, _ := captureRun(t)
	assert.Equal(t, file, again, "same traffic and clock, same bytes")
}

func TestCaptureWriteErrorKeepsTraffic(t *testing.T) {
	w, err := pcapio.NewWriter(io.Discard)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	a0, b := NewMemPair(1500)
	a := Capture(a0, w, fakeClock())
	_, err = a.Send([]Frame{{Data: roceFrame(t, b.MAC(), a.MAC(), ip4a, ip4b, 10, 1)}})
	require.NoError(t, err)
	assert.Len(t, recvN(t, b, 1), 1)
	assert.ErrorIs(t, a.Err(), pcapio.ErrClosed)
	assert.Equal(t, Counter{"capture_errors", 1}, Counters(a)[2])
}

func faultyPair(t *testing.T, spec string, seed uint64) (*FaultyLink, *Mem, *fault.Model) {
	t.Helper()
	s, err := fault.Parse(spec)
	require.NoError(t, err)
	m := fault.New(s, seed)
	a0, b := NewMemPair(1500)
	a := Faulty(a0, m)
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b, m
}

func seqFrames(t *testing.T, n int) ([]Frame, [][]byte) {
	var frames []Frame
	var raw [][]byte
	for i := 0; i < n; i++ {
		f := roceFrame(t, [6]byte{2, 0, 0, 0, 0, 2}, [6]byte{2, 0, 0, 0, 0, 1}, ip4a, ip4b, 64, uint32(i))
		frames = append(frames, Frame{Data: f})
		raw = append(raw, f)
	}
	return frames, raw
}

// seqOf reads the sequence number roceFrame put at the start of the payload.
func seqOf(t *testing.T, b []byte) int {
	var f packet.Frame
	require.NoError(t, packet.ParseFrame(b, &f))
	return int(binary.BigEndian.Uint32(f.Transport[packet.BTHLen:]))
}

func TestFaultyLossMatchesModel(t *testing.T) {
	const n = 500
	a, b, _ := faultyPair(t, "loss=30%", 11)
	frames, _ := seqFrames(t, n)
	sent, err := a.Send(frames)
	require.NoError(t, err)
	assert.Equal(t, n, sent)

	// The same spec and seed decide the same frames.
	ref := fault.New(a.m.Spec(), 11)
	var want []int
	for i := 0; i < n; i++ {
		if !ref.Decide(64 + 12 + 4).Drop {
			want = append(want, i)
		}
	}
	var got []int
	for _, f := range recvN(t, b, len(want)) {
		got = append(got, seqOf(t, f))
	}
	assert.Equal(t, want, got)
	st := a.Stats()
	assert.Equal(t, uint64(n-len(want)), st.Lost)
	assert.Equal(t, uint64(n), st.Frames)
	assert.InDelta(t, 0.3, float64(st.Lost)/n, 0.07)
}

func TestFaultyDuplicate(t *testing.T) {
	a, b, _ := faultyPair(t, "dup=100%", 1)
	frames, raw := seqFrames(t, 10)
	_, err := a.Send(frames)
	require.NoError(t, err)
	got := recvN(t, b, 20)
	for i := 0; i < 10; i++ {
		assert.Equal(t, raw[i], got[2*i])
		assert.Equal(t, raw[i], got[2*i+1])
	}
	assert.Equal(t, uint64(10), a.Stats().Duplicated)
}

func TestFaultyCorruptFailsICRCOnly(t *testing.T) {
	a, b, _ := faultyPair(t, "corrupt=100%,bits=3", 5)
	frames, raw := seqFrames(t, 200)
	orig := make([][]byte, len(raw))
	for i := range raw {
		orig[i] = bytes.Clone(raw[i])
	}
	_, err := a.Send(frames)
	require.NoError(t, err)
	got := recvN(t, b, 200)
	for i, g := range got {
		assert.Equal(t, orig[i], raw[i], "the sender's buffer is not touched")
		var f packet.Frame
		require.NoError(t, packet.ParseFrame(g, &f), "headers intact: the frame still parses")
		hdr := len(f.Eth) + len(f.IP) + len(f.UDP)
		assert.Equal(t, orig[i][:hdr], g[:hdr])
		diff := 0
		for j := hdr; j < len(g); j++ {
			for x := g[j] ^ orig[i][j]; x != 0; x &= x - 1 {
				diff++
			}
		}
		assert.True(t, diff >= 1 && diff <= 3, "frame %d: %d bits flipped", i, diff)
		assert.False(t, f.ICRCOK(), "frame %d: ICRC must catch it", i)
	}
	assert.Equal(t, uint64(200), a.Stats().Corrupted)
}

func TestFaultyDelayAndReorder(t *testing.T) {
	a, b, _ := faultyPair(t, "reorder=20%,reorder_delay=2ms", 3)
	frames, _ := seqFrames(t, 300)
	_, err := a.Send(frames)
	require.NoError(t, err)
	got := recvN(t, b, 300)
	seen := map[int]bool{}
	inversions := 0
	prev := -1
	for _, g := range got {
		s := seqOf(t, g)
		require.False(t, seen[s], "frame %d twice", s)
		seen[s] = true
		if s < prev {
			inversions++
		}
		prev = s
	}
	assert.Len(t, seen, 300, "reordering loses nothing")
	st := a.Stats()
	assert.Greater(t, inversions, 0)
	assert.Equal(t, st.Reordered, st.Delayed)
	assert.InDelta(t, 60, float64(st.Reordered), 25)

	// A plain delay keeps the order (equal delays, ties in send order).
	a2, b2, _ := faultyPair(t, "delay=3ms", 3)
	_, err = a2.Send(frames[:50])
	require.NoError(t, err)
	for i, g := range recvN(t, b2, 50) {
		assert.Equal(t, i, seqOf(t, g))
	}
	assert.Equal(t, uint64(50), a2.Stats().Delayed)
}

func TestFaultyCloseDiscardsPending(t *testing.T) {
	a, _, _ := faultyPair(t, "delay=1h", 3)
	frames, _ := seqFrames(t, 5)
	_, err := a.Send(frames)
	require.NoError(t, err)
	require.NoError(t, a.Close())
	assert.Equal(t, uint64(5), a.Stats().Discarded)
	assert.ErrorIs(t, a.Close(), ErrClosed)
	_, err = a.Send(frames)
	assert.ErrorIs(t, err, ErrClosed)
}

func TestMiddlewareForwardsFixedSourcePort(t *testing.T) {
	u := listenUDP(t, UDPOptions{Addr: udpAddr(t, "127.0.91.2:54791")})
	w, err := pcapio.NewWriter(io.Discard)
	require.NoError(t, err)
	l := Capture(Faulty(u, fault.New(fault.Spec{}, 1)), w, time.Now)
	p, fixed := FixedSourcePort(l)
	assert.True(t, fixed)
	assert.Equal(t, uint16(54791), p)
	names := map[string]bool{}
	for _, c := range Counters(l) {
		names[c.Name] = true
	}
	assert.True(t, names["capture_out"] && names["fault_lost"] && names["udp_tx_frames"])
}

// A frame whose IPv4 header the link rebuilt (a UDP socket shows no IP ID) is
// captured with the ID and DF bit the sender used, recovered from the ICRC,
// so the capture's ICRCs check; one that matches no ID is captured as it is.
func TestCaptureRecoversIPID(t *testing.T) {
	const mac = "\x02\x00\x00\x00\x00\x01"
	wire := func(id uint16, df bool) []byte {
		a := packet.Addressing{Src: ip4a, Dst: ip4b, SrcPort: 0xC001, HopLimit: 64, DF: df, IPID: id}
		p := packet.Packet{Payload: []byte("payload!")}
		p.BTH = packet.BTHFields{Opcode: packet.RCSendOnly, PKey: 0xFFFF, DestQP: 0x11, PSN: 9}
		return packet.AppendFrame(nil, &packet.Ethernet{Dst: [6]byte([]byte(mac)), Src: [6]byte([]byte(mac))}, &a, &p)
	}
	rebuilt := func(f []byte) []byte { // what the UDP link delivers: ID 0, DF
		f = bytes.Clone(f)
		ip := f[14:34]
		packet.SetIPv4ID(ip, 0, true)
		return f
	}
	sent := wire(7, false)
	bad := rebuilt(wire(9, true))
	bad[len(bad)-1] ^= 0xFF // no ID fits this ICRC

	var buf bytes.Buffer
	w, err := pcapio.NewWriter(&buf)
	require.NoError(t, err)
	a0, b0 := NewMemPair(1500)
	b := Capture(b0, w, fakeClock())
	_, err = a0.Send([]Frame{{Data: rebuilt(sent), IPIDUnknown: true}, {Data: bad, IPIDUnknown: true}})
	require.NoError(t, err)
	got := recvN(t, b, 2)
	assert.Equal(t, rebuilt(sent), got[0], "the traffic itself is untouched")
	require.NoError(t, w.Flush())

	r, err := pcapio.NewReader(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)
	rec, err := r.Next()
	require.NoError(t, err)
	assert.Equal(t, "in ipid-recovered", rec.Comment)
	assert.Equal(t, sent, rec.Data)
	var f packet.Frame
	require.NoError(t, rec.Frame(&f))
	assert.True(t, f.ICRCOK())
	rec, err = r.Next()
	require.NoError(t, err)
	assert.Equal(t, "in ipid-unknown", rec.Comment)
	assert.Equal(t, bad, rec.Data)
}
