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
	base := defaultLink().APSN
	resp := func(i uint32) Pred { // the first transmission of response i
		return All(FromB(), Kind(packet.KindReadResponse), PSNIs(psnAdd(base, i)))
	}
	var repair Pred = All(FromA(), Op(packet.RCReadRequest), func(f *Frame) bool { return f.Seq > 2 })
	for _, tc := range []struct {
		name       string
		pkts       uint32 // per READ; 8 if 0
		mtu        uint32 // path MTU; 1024 if 0
		drop       []Pred // each drops its first match (repair: the next repair)
		repairs    int    // repair requests sent
		goBackN    bool   // a go-back-N is expected instead
		timeoutOK  bool   // the local ACK timeout may run out
		goBackNToo bool   // a go-back-N follows the repairs
		reads      int    // READs posted together; 3 if 0
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
		// A READ longer than the window of kept responses: what comes
		// past it is dropped, and asked for again (a go-back-N from the
		// end of what was kept) as soon as the repair's answer arrives.
		{name: "longer than the window", mtu: 256, pkts: 300, repairs: 2, goBackNToo: true,
			drop: []Pred{resp(2), All(FromB(), Op(packet.RCReadResponseLast), PSNIs(psnAdd(base, 2)))}},
		{name: "one READ longer than the window", mtu: 256, pkts: 300, reads: 1, repairs: 2, goBackNToo: true,
			drop: []Pred{resp(2), All(FromB(), Op(packet.RCReadResponseLast), PSNIs(psnAdd(base, 2)))}},
		// Both copies lost: only the timer is left.
		{name: "both copies lost", drop: []Pred{resp(20), nil, nil}, repairs: 3, timeoutOK: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pkts, mtu := max(tc.pkts, 8), max(tc.mtu, 1024)
			if tc.mtu != 0 {
				mtu = tc.mtu
			}
			l := defaultLink()
			l.MTU = qp.MTU(mtu)
			h := pair(t, qp.RC, l)
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
			reads := max(tc.reads, 1)
			if tc.reads == 0 {
				reads = 3
			}
			var ids []uint64
			for i := range uint64(reads) {
				ids = append(ids, i+1)
				n := pkts * mtu
				h.A.postSend(t, readWR(i+1, 0x1000+i*uint64(n), 0x100+i*uint64(n), n))
			}
			h.MustRun(h.sendsDone(h.A, reads))
			h.MustRun(nil)
			requireWCs(t, h.A.sendWCs, ids, qp.WCSuccess)
			n := uint32(reads) * pkts * mtu
			require.Equal(t, h.B.remote[0x100:0x100+n], h.A.local[0x1000:0x1000+n])
			c := h.A.qp.Counters()
			if tc.goBackN {
				require.NotZero(t, c.CompleterRetryErr, "%s", h.Dump(40))
				require.Zero(t, c.ReadRepairs)
				return
			}
			require.Equal(t, uint64(tc.repairs), c.ReadRepairs, "%s", h.Dump(60))
			require.Zero(t, h.B.qp.Counters().RespSuperseded)
			if !tc.timeoutOK {
				if !tc.goBackNToo {
					require.Zero(t, c.CompleterRetryErr, "no go-back-N\n%s", h.Dump(60))
				}
				require.Less(t, int64(h.Now), int64(60*qp.Millisecond), "no timeout\n%s", h.Dump(60))
			}
		})
	}
}
