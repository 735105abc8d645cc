package rxe

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/cm"
	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
)

// TestAckBeforeDREQ: a program that disconnects as soon as it sees its last
// message complete (librdmacm's rdma_disconnect: the QP to ERR, then a
// DREQ) gets both in before the device's next output, as a program on a
// busy machine does. The ACK that answers the message must still reach the
// wire ahead of the DREQ, as an RNIC (or rxe, which sends it as it
// completes the message) has sent it before the program could see the
// completion: a peer that takes the DREQ first and moves its QP to ERR
// fails, flushed, the SEND the ACK was for.
func TestAckBeforeDREQ(t *testing.T) {
	for _, toErr := range []bool{false, true} {
		name := "DREQ alone"
		if toErr {
			name = "QP to ERR, then DREQ"
		}
		t.Run(name, func(t *testing.T) {
			da := newDev(t, "a", macA, ipA, ip6A, 1500)
			db := newDev(t, "b", macB, ipB, ip6B, 1500)
			n := newNet(da, db)
			a, b := connect(t, da, db, qp.RC, 4, 1024)

			// An rdma_cm connection between the two, for b to end.
			ida, evB := cmRequest(t, n, da, db)
			require.Len(t, evB, 1)
			idb := evB[0].Conn
			db.WithCM(n.now, func(m *cm.Manager, now cm.Time) {
				rep := packet.CMRep{LocalQPN: b.qp.QPN(), StartingPSN: 5, ResponderResources: 1, InitiatorDepth: 1, TargetACKDelay: 15, RNRRetryCount: 7}
				require.NoError(t, m.Accept(now, idb, &rep))
			})
			n.deliver(t)
			cmEvents(da, n.now)
			da.WithCM(n.now, func(m *cm.Manager, now cm.Time) { require.NoError(t, m.Ready(now, ida, nil)) })
			n.deliver(t)
			cmEvents(db, n.now)

			// a's last SEND reaches b, whose program sees it complete
			// and disconnects before b's device sends anything.
			require.NoError(t, b.qp.PostRecv(&qp.RecvWR{ID: 1}))
			require.NoError(t, a.qp.PostSend(&qp.SendWR{ID: 2, Opcode: qp.WRSend, Flags: qp.SendSignaled | qp.SendInline, Inline: []byte("fin")}))
			k, _ := da.Output(n.now, n.frames)
			require.Equal(t, 1, k, "a's SEND")
			db.HandleFrame(n.now, n.frames[0])
			wc := make([]qp.WC, 4)
			require.Equal(t, 1, b.rcq.Poll(wc), "b's receive completed")
			if toErr {
				require.NoError(t, b.qp.Modify(&qp.Attr{State: qp.Err}, qp.AttrState))
			}
			db.WithCM(n.now, func(m *cm.Manager, now cm.Time) { require.NoError(t, m.Disconnect(now, idb, nil)) })

			k, _ = db.Output(n.now, n.frames)
			var order []string
			for _, f := range n.frames[:k] {
				var fr packet.Frame
				require.NoError(t, packet.ParseFrame(f.Data, &fr))
				var p packet.Packet
				require.NoError(t, p.Decode(fr.Transport))
				if mad, ok := p.MAD(); ok {
					if mad.AttrID() == packet.CMAttrDREQ {
						order = append(order, "DREQ")
					}
					continue
				}
				if p.BTH.Opcode == packet.RCAcknowledge {
					order = append(order, "ACK")
				}
			}
			require.Equal(t, []string{"ACK", "DREQ"}, order, "b's frames")
		})
	}
}
