package qp_test

import (
	"testing"

	"github.com/softroce/softroce/packet"
	"github.com/softroce/softroce/qp"
	"github.com/stretchr/testify/require"
)

// TestReadRepair loses READ responses (and repairs, and their answers) in
// three READs of eight packets each, outstanding together, and checks that
// the data arrive right and the READs complete in order; where the holes lie
// inside a READ, without a go-back-N and without waiting out the local ACK
// timeout (67 ms here), and with the repairs the case expects.
func TestReadRepair(t *testing.T) {
	const pkts = 8
	base := defaultLink().APSN
	resp := func(i uint32) Pred { // the first transmission of response i
		return All(FromB(), Kind(packet.KindReadResponse), PSNIs(psnAdd(base, i)))
	}
	var repair Pred = All(FromA(), Op(packet.RCReadRequest), func(f *Frame) bool { return f.Pkt.RETH.Length < pkts*1024 && f.Seq > 2 })
	for _, tc := range []struct {
		name       string
		drop       []Pred // each drops its first match (repair: the next repair)
		repairs    int    // repair requests sent
		goBackN    bool   // a go-back-N is expected instead
		timeoutOK  bool   // the local ACK timeout may run out
		keptAtMost uint64
	}{
		{name: "one inside the first READ", drop: []Pred{resp(2)}, repairs: 1},
		{name: "first packet of a READ", drop: []Pred{resp(8)}, repairs: 1},
		{name: "two adjacent: one repair of two packets", drop: []Pred{resp(3), resp(4)}, repairs: 1},
		{name: "two holes in one READ, in turn", drop: []Pred{resp(1), resp(5)}, repairs: 2},
		{name: "holes in two READs", drop: []Pred{resp(2), resp(12)}, repairs: 2},
		// The repair is lost: the responses to PSNs requested before it
		// say so once they are in (the last of them is PSN 23), and it
		// goes out again.
		{name: "repair lost", drop: []Pred{resp(2), nil}, repairs: 2},
		{name: "repair's answer lost", drop: []Pred{resp(2), All(FromB(), Op(packet.RCReadResponseLast), PSNIs(psnAdd(base, 2)))}, repairs: 2},
		// A hole that runs to the end of a READ is a go-back-N.
		{name: "last packet of a READ", drop: []Pred{resp(7)}, goBackN: true},
		// The last READ's hole once every response is in: no later
		// response could report a lost repair, so it goes out twice.
		{name: "hole when nothing more comes", drop: []Pred{resp(20)}, repairs: 2},
		// Both copies lost: only the timer is left.
		{name: "both copies lost", drop: []Pred{resp(20), nil, nil}, repairs: 3, timeoutOK: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := pair(t, qp.RC, defaultLink())
			nth := map[*Pred]int{}
			for i := range tc.drop {
				p := &tc.drop[i]
				if *p == nil {
					p = &repair
				}
				nth[p]++
				h.Drop(*p, nth[p])
			}
			fill(h.B.remote, 16)
			for i := range uint64(3) {
				h.A.postSend(t, readWR(i+1, 0x1000+i*pkts*1024, 0x100+i*pkts*1024, pkts*1024))
			}
			h.MustRun(h.sendsDone(h.A, 3))
			h.MustRun(nil)
			requireWCs(t, h.A.sendWCs, []uint64{1, 2, 3}, qp.WCSuccess)
			require.Equal(t, h.B.remote[0x100:0x100+3*pkts*1024], h.A.local[0x1000:0x1000+3*pkts*1024])
			c := h.A.qp.Counters()
			if tc.goBackN {
				require.NotZero(t, c.CompleterRetryErr, "%s", h.Dump(40))
				require.Zero(t, c.ReadRepairs)
				return
			}
			require.Equal(t, uint64(tc.repairs), c.ReadRepairs, "%s", h.Dump(60))
			require.Zero(t, h.B.qp.Counters().RespSuperseded)
			if !tc.timeoutOK {
				require.Zero(t, c.CompleterRetryErr, "no go-back-N\n%s", h.Dump(60))
				require.Less(t, int64(h.Now), int64(60*qp.Millisecond), "no timeout\n%s", h.Dump(60))
			}
		})
	}
}
