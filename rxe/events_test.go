package rxe

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/qp"
)

// TestEventChannelMadeOnFirstUse: a device makes its event channel only when
// asked for it or when an event comes; events raised before anyone asked
// arrive on the channel Events returns later; a full channel drops and
// counts; DropEvents empties it without making one.
func TestEventChannelMadeOnFirstUse(t *testing.T) {
	d := newDev(t, "ev0", [6]byte{2, 0, 0, 0, 0, 1}, netip.MustParseAddr("10.0.0.1"), netip.Addr{}, 1500)
	assert.Zero(t, d.DropEvents())
	assert.Nil(t, d.events.Load(), "no channel before an event or a reader")

	d.raise(AsyncEvent{Type: qp.EventQPFatal})
	ch := d.Events()
	require.Len(t, ch, 1)
	assert.Equal(t, qp.EventQPFatal, (<-ch).Type)

	for range eventQueueLen + 3 {
		d.raise(AsyncEvent{Type: qp.EventCommEst})
	}
	assert.Equal(t, uint64(3), d.cnt.EventsDropped)
	assert.Equal(t, ch, d.Events(), "one channel for the device's life")
	assert.Equal(t, eventQueueLen, d.DropEvents())
	assert.Zero(t, d.DropEvents())
}
