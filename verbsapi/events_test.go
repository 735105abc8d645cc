package verbsapi

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// armSRQLimit connects an RC QP of a (on ca) to one with an SRQ on cb, arms
// the SRQ's limit at 3 with 4 receives posted, and returns the SRQ and a
// function that makes the device raise the limit event (two SENDs).
func armSRQLimit(t *testing.T, ca, cb *Context) (*SRQ, func()) {
	t.Helper()
	a := newHost(t, ca, hostOpts{})
	pd, err := cb.AllocPD()
	require.NoError(t, err)
	cq, err := cb.CreateCQ(16, nil)
	require.NoError(t, err)
	srq, err := pd.CreateSRQ(SRQInitAttr{MaxWR: 8, MaxSGE: 1})
	require.NoError(t, err)
	mr, err := pd.RegMR(make([]byte, 1024), AccessAll)
	require.NoError(t, err)
	q, err := pd.CreateQP(QPInitAttr{SendCQ: cq, RecvCQ: cq, SRQ: srq, QPType: RC,
		Cap: QPCap{MaxSendWR: 4, MaxSendSGE: 1}})
	require.NoError(t, err)
	assert.ErrorIs(t, q.PostRecv(&RecvWR{}), ErrHasSRQ, "receives go to the SRQ")
	connectHosts(t, a, &testHost{ctx: cb, pd: pd, scq: cq, rcq: cq, qp: q, mr: mr}, nil)
	for i := range 4 {
		require.NoError(t, srq.PostRecv(&RecvWR{ID: uint64(i), SGL: []SGE{mr.SGE(i*100, 100)}}))
	}
	require.NoError(t, srq.ModifyLimit(3))
	return srq, func() {
		for range 2 {
			require.NoError(t, a.qp.PostSend(&SendWR{Opcode: WRSend, SGL: []SGE{a.mr.SGE(0, 10)}}))
		}
	}
}

// With two contexts on one device, an event about one context's object
// reaches that context only, even when the other is the one waiting on the
// device: as with two ibv_contexts (two uverbs files) in the kernel.
func TestEventsGoToTheOwningContext(t *testing.T) {
	for _, tc := range []struct {
		name        string
		otherWaits  bool // the other context is blocked in GetAsyncEvent first
		ownerPolls  bool // the owner polls instead of waiting
		otherClosed bool
	}{
		{name: "owner waits"},
		{name: "other waits first", otherWaits: true},
		{name: "owner polls", ownerPolls: true, otherWaits: true},
		{name: "other closed", otherClosed: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca, cb := startPair(t)
			other := OpenDevice(cb.Device())
			srq, raise := armSRQLimit(t, ca, cb)

			otherCtx, stopOther := context.WithCancel(context.Background())
			otherDone := make(chan error, 1)
			if tc.otherClosed {
				require.NoError(t, other.Close())
				_, err := other.GetAsyncEvent(context.Background())
				assert.ErrorIs(t, err, ErrClosed)
			} else {
				defer other.Close()
			}
			if tc.otherWaits {
				go func() {
					_, err := other.GetAsyncEvent(otherCtx)
					otherDone <- err
				}()
			}
			raise()
			var e AsyncEvent
			if tc.ownerPolls {
				eventually(t, "the limit event", func() bool {
					var ok bool
					e, ok = cb.PollAsyncEvent()
					return ok
				})
			} else {
				e = nextEvent(t, cb)
			}
			assert.Equal(t, EventSRQLimitReached, e.Type)
			assert.Same(t, srq, e.SRQ)
			if !tc.otherClosed {
				_, got := other.PollAsyncEvent()
				assert.False(t, got, "the other context gets nothing")
			}
			stopOther()
			if tc.otherWaits {
				assert.ErrorIs(t, <-otherDone, context.Canceled, "the waiting context was not woken with the owner's event")
			}
			assert.Zero(t, cb.EventsDropped())
		})
	}
}

// A context that does not read its events loses the ones beyond its
// queue, counted; the device and the other contexts are not held up.
func TestEventQueueOverflowCounted(t *testing.T) {
	q := newEventQueue()
	for range eventQueueLen + 5 {
		q.push(AsyncEvent{Type: EventSRQLimitReached})
	}
	assert.Len(t, q.ch, eventQueueLen)
	assert.EqualValues(t, 5, q.dropped.Load())
}

// Closing a context removes it from routing, so a device with many
// short-lived contexts (the drop-in server's programs) keeps no trace.
func TestClosedContextsLeaveRouting(t *testing.T) {
	ca, _ := startPair(t)
	for range 10 {
		c := OpenDevice(ca.Device())
		require.NoError(t, c.Close())
		assert.True(t, errors.Is(c.Close(), ErrClosed))
	}
	assert.Len(t, contextsOf(ca.Device()), 1, "only ca is open")
}
