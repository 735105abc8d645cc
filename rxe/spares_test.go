package rxe

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/qp"
)

// A discarded device's QPs go to its spares, without their engines; the
// next devices' QPs are built in them and carry traffic as new ones do.
func TestDiscardedQPsBuildLaterOnes(t *testing.T) {
	spares := &qp.Spares{Keep: 8}
	devices := func() (*Device, *Device) {
		da, err := New(Config{Name: "rxe0", MAC: macA, IPv4: ipA, MTU: 1500, Seed: 3, QPSpares: spares})
		require.NoError(t, err)
		db, err := New(Config{Name: "rxe1", MAC: macB, IPv4: ipB, MTU: 1500, Seed: 4, QPSpares: spares})
		require.NoError(t, err)
		return da, db
	}
	// traffic WRITEs then READs back 20,000 bytes from a to b.
	traffic := func(da, db *Device) (*side, *side) {
		a, b := connect(t, da, db, qp.RC, 16, 1024)
		n := newNet(da, db)
		abuf, bbuf := make([]byte, 20000), make([]byte, 20000)
		pattern(abuf, 5)
		am, err := da.RegMR(a.pd, abuf, rwAll)
		require.NoError(t, err)
		bm, err := db.RegMR(b.pd, bbuf, rwAll)
		require.NoError(t, err)
		require.NoError(t, a.qp.PostSend(&qp.SendWR{ID: 1, Opcode: qp.WRWrite, Flags: qp.SendSignaled,
			SGL: []qp.SGE{{Addr: am.Addr(), Length: 20000, LKey: am.LKey()}}, RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
		clear(abuf[:100])
		require.NoError(t, a.qp.PostSend(&qp.SendWR{ID: 2, Opcode: qp.WRRead, Flags: qp.SendSignaled,
			SGL: []qp.SGE{{Addr: am.Addr(), Length: 100, LKey: am.LKey()}}, RemoteAddr: bm.Addr(), RKey: bm.RKey()}))
		for _, wc := range n.poll(t, a.scq, 2) {
			require.Equal(t, qp.WCSuccess, wc.Status, wc.Status.String())
		}
		assert.Equal(t, bbuf, abuf, "written and read back")
		return a, b
	}

	da, db := devices()
	a, b := traffic(da, db)
	engines := map[*qp.QP]bool{a.qp.q: true, b.qp.q: true}
	da.Discard()
	db.Discard()
	assert.Nil(t, a.qp.q, "a discarded device's QP has no engine")
	assert.Nil(t, b.qp.q)

	da, db = devices()
	a, b = traffic(da, db)
	assert.True(t, engines[a.qp.q] && engines[b.qp.q], "the new QPs are built in the discarded ones")

	// Without spares, Discard leaves the device as it was.
	dc := newDev(t, "rxe2", macA, ipA, netip.Addr{}, 1500)
	c := newSide(t, dc, qp.RC, 4)
	dc.Discard()
	assert.NotNil(t, c.qp.q)
}
