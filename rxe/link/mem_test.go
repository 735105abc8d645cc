package link

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMemPairRoundTrip(t *testing.T) {
	a, b := NewMemPair(1500)
	defer a.Close()
	defer b.Close()
	var _ Link = a
	assert.Equal(t, 1500, a.MTU())
	assert.NotEqual(t, a.MAC(), b.MAC())

	f1 := roceFrame(t, b.MAC(), a.MAC(), ip4a, ip4b, 100, 1)
	f2 := roceFrame(t, b.MAC(), a.MAC(), ip4a, ip4b, 200, 2)
	n, err := a.Send([]Frame{{Data: f1}, {Data: f2, IPIDUnknown: true}})
	require.NoError(t, err)
	require.Equal(t, 2, n)
	f1[20] ^= 0xFF // the link copied: changing the sender's buffer changes nothing

	got := make([]Frame, 8)
	n, err = b.Recv(got)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	f1[20] ^= 0xFF
	assert.Equal(t, f1, got[0].Data)
	assert.False(t, got[0].IPIDUnknown)
	assert.Equal(t, f2, got[1].Data)
	assert.True(t, got[1].IPIDUnknown)

	// And the other way.
	f3 := roceFrame(t, a.MAC(), b.MAC(), ip4b, ip4a, 64, 3)
	_, err = b.Send([]Frame{{Data: f3}})
	require.NoError(t, err)
	n, err = a.Recv(got)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	assert.Equal(t, f3, got[0].Data)

	assert.Equal(t, MemStats{Sent: 2, Received: 1}, a.Stats())
	assert.Equal(t, MemStats{Sent: 1, Received: 2}, b.Stats())
}

func TestMemRecvSmallBatches(t *testing.T) {
	a, b := NewMemPair(1500)
	var frames []Frame
	for i := 0; i < 10; i++ {
		frames = append(frames, Frame{Data: roceFrame(t, b.MAC(), a.MAC(), ip4a, ip4b, 40, uint32(i))})
	}
	_, err := a.Send(frames)
	require.NoError(t, err)
	got := make([]Frame, 3)
	seq := 0
	for seq < 10 {
		n, err := b.Recv(got)
		require.NoError(t, err)
		for _, f := range got[:n] {
			require.Equal(t, frames[seq].Data, f.Data)
			seq++
		}
	}
}

func TestMemDropTailAndOversize(t *testing.T) {
	hub := NewMemHub(MemOptions{MTU: 1000, QueueLen: 4})
	a := hub.Attach([6]byte{2, 0, 0, 0, 0, 0xa})
	b := hub.Attach([6]byte{2, 0, 0, 0, 0, 0xb})
	var frames []Frame
	for i := 0; i < 6; i++ {
		frames = append(frames, Frame{Data: roceFrame(t, b.MAC(), a.MAC(), ip4a, ip4b, 100, uint32(i))})
	}
	big := roceFrame(t, b.MAC(), a.MAC(), ip4a, ip4b, 1000, 99) // IP packet > 1000 bytes
	frames = append(frames, Frame{Data: big})
	n, err := a.Send(frames)
	require.NoError(t, err)
	assert.Equal(t, 7, n)
	assert.Equal(t, uint64(4), a.Stats().Sent)
	assert.Equal(t, uint64(1), a.Stats().Oversize)
	assert.Equal(t, uint64(2), b.Stats().QueueDrop)

	got := make([]Frame, 2)
	n, err = b.Recv(got)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	assert.Equal(t, frames[0].Data, got[0].Data, "drop-tail keeps the oldest")
	// Lent buffers count against the ring: nothing fits now.
	_, err = a.Send(frames[4:5])
	require.NoError(t, err)
	assert.Equal(t, uint64(3), b.Stats().QueueDrop)
	assert.Equal(t, frames[0].Data, got[0].Data)
	n, err = b.Recv(got)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	assert.Equal(t, frames[2].Data, got[0].Data)
	assert.Equal(t, frames[3].Data, got[1].Data)
	// The first two buffers are free again; the ones just lent are not
	// overwritten by the next frames.
	_, err = a.Send(frames[4:6])
	require.NoError(t, err)
	assert.Equal(t, uint64(3), b.Stats().QueueDrop)
	assert.Equal(t, frames[2].Data, got[0].Data)
	assert.Equal(t, frames[3].Data, got[1].Data)
	n, err = b.Recv(got)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	assert.Equal(t, frames[4].Data, got[0].Data)
	assert.Equal(t, frames[5].Data, got[1].Data)
}

func TestMemHubRouting(t *testing.T) {
	hub := NewMemHub(MemOptions{})
	a := hub.Attach([6]byte{2, 0, 0, 0, 0, 0xa}, ip4a)
	b := hub.Attach([6]byte{2, 0, 0, 0, 0, 0xb}, netip.AddrFrom16(ip4b.As16())) // v4-mapped
	c := hub.Attach([6]byte{2, 0, 0, 0, 0, 0xc}, ip4c)

	toB := roceFrame(t, b.MAC(), a.MAC(), ip4a, ip4b, 10, 1)
	toCByIP := roceFrame(t, [6]byte{}, a.MAC(), ip4a, ip4c, 10, 2)
	bcast := roceFrame(t, [6]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, a.MAC(), ip4a, ip4b, 10, 3)
	nowhere := roceFrame(t, [6]byte{2, 9, 9, 9, 9, 9}, a.MAC(), ip4a, ip4b, 10, 4)
	unknownIP := roceFrame(t, [6]byte{}, a.MAC(), ip4a, netip.MustParseAddr("10.9.9.9"), 10, 5)
	_, err := a.Send([]Frame{{Data: toB}, {Data: toCByIP}, {Data: bcast}, {Data: nowhere}, {Data: unknownIP}, {Data: []byte{1}}})
	require.NoError(t, err)
	assert.Equal(t, uint64(3), a.Stats().NoRoute)

	got := make([]Frame, 8)
	n, err := b.Recv(got)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	assert.Equal(t, toB, got[0].Data)
	assert.Equal(t, bcast, got[1].Data)
	n, err = c.Recv(got)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	assert.Equal(t, toCByIP, got[0].Data)
	assert.Equal(t, bcast, got[1].Data)

	// A closed port is detached: frames to it have no route.
	require.NoError(t, c.Close())
	_, err = a.Send([]Frame{{Data: toCByIP}})
	require.NoError(t, err)
	assert.Equal(t, uint64(4), a.Stats().NoRoute)
}

func TestMemCloseUnblocksRecv(t *testing.T) {
	a, b := NewMemPair(1500)
	done := make(chan error)
	go func() {
		_, err := b.Recv(make([]Frame, 1))
		done <- err
	}()
	time.Sleep(10 * time.Millisecond) // let Recv block (correct either way)
	require.NoError(t, b.Close())
	assert.ErrorIs(t, <-done, ErrClosed)
	assert.ErrorIs(t, b.Close(), ErrClosed)
	_, err := b.Send([]Frame{{Data: make([]byte, 60)}})
	assert.ErrorIs(t, err, ErrClosed)
	_, err = a.Send([]Frame{{Data: make([]byte, 60)}})
	require.NoError(t, err, "sending to a closed peer is like sending to a dead host")
	assert.Equal(t, uint64(1), a.Stats().ToClosed)
	_, err = b.Recv(make([]Frame, 1))
	assert.True(t, errors.Is(err, ErrClosed))
}

// A producer and a consumer running concurrently: every frame arrives
// intact and in order, or is counted as dropped.
func TestMemConcurrent(t *testing.T) {
	a, b := NewMemPair(9000)
	const total = 20000
	frame := roceFrame(t, b.MAC(), a.MAC(), ip4a, ip4b, 1024, 0)
	var wg sync.WaitGroup
	done := make(chan struct{})
	var markers atomic.Uint64
	wg.Add(1)
	go func() {
		defer wg.Done()
		batch := make([]Frame, 16)
		bufs := make([][]byte, 16)
		for i := range bufs {
			bufs[i] = bytes.Clone(frame)
		}
		for seq := 0; seq < total; {
			for i := range batch {
				binary.BigEndian.PutUint32(bufs[i][len(bufs[i])-40:], uint32(seq))
				batch[i].Data = bufs[i]
				seq++
			}
			_, err := a.Send(batch)
			if err != nil {
				return
			}
		}
		// The marker may meet a full ring: repeat it until it is seen.
		for {
			_, _ = a.Send([]Frame{{Data: []byte("end-of-test-marker-frame")}})
			markers.Add(1)
			select {
			case <-done:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	got := make([]Frame, 64)
	last := -1
	recvd := 0
loop:
	for {
		n, err := b.Recv(got)
		require.NoError(t, err)
		for i, f := range got[:n] {
			if len(f.Data) != len(frame) {
				// The first marker; later markers of the same batch
				// (the sender repeats it) were received too.
				recvd += n - 1 - i
				close(done)
				break loop
			}
			seq := int(binary.BigEndian.Uint32(f.Data[len(f.Data)-40:]))
			require.Greater(t, seq, last)
			last = seq
			recvd++
		}
	}
	wg.Wait()
	// Every frame and every marker but the one seen was received, dropped,
	// or (a marker sent late) is still queued.
	assert.Equal(t, uint64(total)+markers.Load()-1, uint64(recvd)+b.Stats().QueueDrop+uint64(b.q.n))
	assert.Greater(t, recvd, 0)
}

func TestMemNoAllocs(t *testing.T) {
	a, b := NewMemPair(4096 + 128)
	f := roceFrame(t, b.MAC(), a.MAC(), ip4a, ip4b, 4096, 1)
	out := []Frame{{Data: f}, {Data: f}, {Data: f}, {Data: f}}
	in := make([]Frame, 8)
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := a.Send(out); err != nil {
			t.Fatal(err)
		}
		if n, err := b.Recv(in); err != nil || n != 4 {
			t.Fatal(n, err)
		}
	})
	assert.Zero(t, allocs)
}

func TestCounters(t *testing.T) {
	a, _ := NewMemPair(1500)
	cs := Counters(a)
	require.Len(t, cs, 6)
	assert.Equal(t, "mem_sent", cs[0].Name)
	_, fixed := FixedSourcePort(a)
	assert.False(t, fixed)
}
