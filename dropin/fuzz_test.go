package dropin

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/softroce/softroce/rxe"
	"github.com/softroce/softroce/verbsapi"
)

// fuzzOps are the ops a fuzzed request byte picks from (REG_MR without its
// memfds only tests the refusal; the memfd path has its own tests).
var fuzzOps = []uint32{
	opList, opQueryDevice, opQueryPort, opQueryGID, opQueryPKey,
	opAsyncFD, opGetAsyncEvent, opAllocPD, opDeallocPD, opRegMR, opDeregMR,
	opCreateCompChannel, opDestroyCompChannel, opGetCQEvent,
	opCreateCQ, opDestroyCQ, opResizeCQ, opPollCQ, opReqNotifyCQ,
	opCreateQP, opModifyQP, opQueryQP, opDestroyQP, opPostSend, opPostRecv,
	opCreateSRQ, opModifySRQ, opQuerySRQ, opDestroySRQ, opPostSRQRecv,
	opCreateAH, opDestroyAH,
	// Appended, so that the indexes above (and the seeds) keep their ops:
	// re-registration and memory windows, which bind to regions and QPs.
	opReregMR, opAllocMW, opDeallocMW,
}

// fuzzRecord is one request in a fuzz input: op index, body length, body.
func fuzzRecord(op uint32, body []byte) []byte {
	i := 0
	for j, o := range fuzzOps {
		if o == op {
			i = j
		}
	}
	return append([]byte{byte(i), byte(len(body))}, body...)
}

// FuzzDaemonCalls feeds a program's calls, as the daemon decodes them from
// its socket, in arbitrary sequences: a program is as hostile as the wire.
// No call may panic (the daemon would drop the client), and when the client
// is gone the device must hold nothing it created.
func FuzzDaemonCalls(f *testing.F) {
	gid := [16]byte{10: 0xff, 11: 0xff, 12: 10, 13: 0, 14: 0, 15: 7}
	rts := wireQPAttr{QPState: uint32(verbsapi.QPSInit), PortNum: 1, QPAccessFlags: 0xf}
	var seed []byte
	seed = append(seed, fuzzRecord(opAllocPD, nil)...)
	seed = append(seed, fuzzRecord(opCreateCQ, enc(wireCreateCQ{CQE: 8, Channel: srNone}))...)
	seed = append(seed, fuzzRecord(opCreateQP, enc(wireCreateQP{PD: 1, SendCQ: 2, RecvCQ: 2, SRQ: srNone, QPType: ibvQPTRC,
		Cap: wireQPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}))...)
	seed = append(seed, fuzzRecord(opModifyQP, enc(wireModifyQP{Handle: 3,
		Mask: uint32(verbsapi.QPAttrState | verbsapi.QPAttrPKeyIndex | verbsapi.QPAttrPort | verbsapi.QPAttrAccessFlags), Attr: rts}))...)
	seed = append(seed, fuzzRecord(opPostRecv, enc(wirePost{Handle: 3, NWR: 1}, wireRecvWR{WRID: 1, NumSGE: 1}, wireSGE{Addr: 4096, Length: 8, LKey: 5}))...)
	seed = append(seed, fuzzRecord(opCreateAH, enc(wireCreateAH{PD: 1, Attr: wireAHAttr{DGID: gid, IsGlobal: 1, PortNum: 1}}))...)
	seed = append(seed, fuzzRecord(opAllocMW, enc(wireAllocMW{PD: 1, Type: 2}))...)
	seed = append(seed, fuzzRecord(opReregMR, enc(wireReregMR{Handle: 1, Flags: 4, Access: 1}))...)
	seed = append(seed, fuzzRecord(opDeallocMW, enc(wireHandle{1}))...)
	seed = append(seed, fuzzRecord(opCreateSRQ, enc(wireCreateSRQ{PD: 1, MaxWR: 4, MaxSGE: 1}))...)
	seed = append(seed, fuzzRecord(opPollCQ, enc(wirePollCQ{Handle: 2, Max: 4}))...)
	seed = append(seed, fuzzRecord(opDestroyQP, enc(wireHandle{3}))...)
	f.Add(seed)
	f.Add(fuzzRecord(opPostSend, enc(wirePost{Handle: 1, NWR: 3})))
	f.Add([]byte{})

	d, err := startDaemon(linkFlags{Link: "mem", Addr: "10.0.0.7"}, "rxe7", filepath.Join(f.TempDir(), "f.sock"))
	require.NoError(f, err)
	f.Cleanup(func() { d.Close() })

	f.Fuzz(func(t *testing.T, in []byte) {
		c := newTestConn(d)
		for len(in) >= 2 {
			op := fuzzOps[int(in[0])%len(fuzzOps)]
			n := min(int(in[1]), len(in)-2)
			r := request{op: op, body: in[2 : 2+n]}
			in = in[2+n:]
			_, err := c.run(&r)
			require.NoError(t, err)
		}
		c.cleanup()
		require.Eventually(t, func() bool { return d.ctx.Device().Resources() == rxe.Resources{} },
			5*time.Second, time.Millisecond, "left: %+v", d.ctx.Device().Resources())
	})
}
