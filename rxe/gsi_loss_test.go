package rxe

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
)

// cmUnderLoss connects and disconnects two devices with the connection
// manager while the network drops every MAD with probability 2/5 (a fixed
// pattern), in virtual time, and returns the frames that crossed it and the
// virtual time it took.
func cmUnderLoss(t *testing.T) ([][]byte, qp.Time) {
	da := newDev(t, "a", macA, ipA, ip6A, 1500)
	db := newDev(t, "b", macB, ipB, ip6B, 1500)
	n := newNet(da, db)
	var frames [][]byte
	k := 0
	n.filter = func(from, to *Device, f []byte) bool {
		frames = append(frames, append([]byte(nil), f...))
		k++
		return k%5 != 1 && k%5 != 3 // drop the 1st and 3rd of every five
	}
	db.WithCM(0, func(m *cm.Manager, _ cm.Time) {
		_, err := m.Listen(rpingSID)
		require.NoError(t, err)
	})
	req, _ := rpingREQ(t)
	req.Primary.LocalGID, req.Primary.RemoteGID = ipA.As16(), ipB.As16()
	var ida, idb cm.ConnID
	da.WithCM(0, func(m *cm.Manager, now cm.Time) {
		var err error
		ida, err = m.Connect(now, ipB, &req)
		require.NoError(t, err)
	})
	// A consumer that answers each event at once.
	established, disconnected := false, false
	for round := 0; round < 200 && !disconnected; round++ {
		n.pump(t, 1e6, 1)
		for _, e := range cmEvents(db, n.now) {
			switch e.Kind {
			case cm.EventReq:
				idb = e.Conn
				db.WithCM(n.now, func(m *cm.Manager, now cm.Time) {
					rep := packet.CMRep{LocalQPN: 0x11, StartingPSN: 5, ResponderResources: 1, InitiatorDepth: 1, TargetACKDelay: 15, RNRRetryCount: 7}
					require.NoError(t, m.Accept(now, e.Conn, &rep))
				})
			case cm.EventEstablished:
				established = true
				db.WithCM(n.now, func(m *cm.Manager, now cm.Time) { require.NoError(t, m.Disconnect(now, idb, nil)) })
			case cm.EventDisconnected:
				disconnected = true
			}
		}
		for _, e := range cmEvents(da, n.now) {
			switch e.Kind {
			case cm.EventRep:
				da.WithCM(n.now, func(m *cm.Manager, now cm.Time) { require.NoError(t, m.Ready(now, ida, nil)) })
			case cm.EventDisconnectRequest:
				da.WithCM(n.now, func(m *cm.Manager, now cm.Time) { require.NoError(t, m.Disconnect(now, ida, nil)) })
			case cm.EventUnreachable, cm.EventRejected:
				t.Fatalf("connection failed: %v", e.Kind)
			}
		}
	}
	require.True(t, established && disconnected, "established %v, disconnected %v", established, disconnected)
	return frames, n.now
}

// TestGSIConnectUnderLoss: the connection comes up and goes down although
// two MADs in five are lost, by the manager's retransmissions on the
// device's timers, in virtual time; the same run twice sends the same
// frames at the same times.
func TestGSIConnectUnderLoss(t *testing.T) {
	a, at := cmUnderLoss(t)
	b, bt := cmUnderLoss(t)
	require.Equal(t, a, b, "deterministic")
	require.Equal(t, at, bt)
	require.Greater(t, len(a), 5, "lost MADs were sent again")
	t.Logf("%d MADs in %v of virtual time", len(a), at)
}
