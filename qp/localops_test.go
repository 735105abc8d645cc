package qp

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBindMW: BIND_MW is a local operation on RC and UC QPs, executed by the
// requester in queue order without a PSN and completed in order with
// opcode BIND_MW; a bind the memory refuses completes with MW_BIND_ERR and
// takes the QP to ERR, as rxe's rxe_do_local_ops.
func TestBindMW(t *testing.T) {
	bind := BindMW{MWRKey: 0x80001_07, RKey: 0x80001_08,
		BindInfo: MWBindInfo{MRLKey: 1, Addr: 8, Length: 32, MWAccessFlags: AccessRemoteWrite}}
	for _, typ := range []Type{RC, UC} {
		t.Run(typ.String(), func(t *testing.T) {
			r := newSendRig(t, typ, 256)
			r.buf(1, 64, AccessLocalWrite|AccessMWBind)
			r.post(SendWR{ID: 1, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 8, LKey: 1}}})
			// SendInline on a local operation is ignored, as for LOCAL_INV.
			r.post(SendWR{ID: 2, Opcode: WRBindMW, Flags: SendSignaled | SendInline, BindMW: bind})
			r.post(SendWR{ID: 3, Opcode: WRSend, Flags: SendSignaled, SGL: []SGE{{Length: 8, LKey: 1}}})
			ps := r.tx()
			assert.Equal(t, []uint32{100, 101}, psns(ps), "BIND_MW takes no PSN")
			assert.Equal(t, []BindMW{bind}, r.mem.Bound, "executed in order at the requester")
			if typ == RC {
				assert.Empty(t, r.poll(), "completes in order, behind the unacknowledged SEND")
				r.ack(101)
			}
			wcs := r.poll()
			require.Len(t, wcs, 3)
			assert.Equal(t, []uint64{1, 2, 3}, wcIDs(wcs))
			assert.Equal(t, WC{ID: 2, Status: WCSuccess, Opcode: WCBindMW, QPN: rigQPN}, wcs[1])
		})
	}
}

func TestBindMWErrors(t *testing.T) {
	t.Run("refused bind", func(t *testing.T) {
		r := newSendRig(t, RC, 256)
		r.post(SendWR{ID: 4, Opcode: WRBindMW, BindMW: BindMW{}}) // unsignaled: errors complete anyway
		r.post(SendWR{ID: 5, Opcode: WRSend})
		assert.Empty(t, r.tx())
		wcs := r.poll()
		require.Len(t, wcs, 2)
		assert.Equal(t, WC{ID: 4, Status: WCMWBindErr, QPN: rigQPN}, wcs[0])
		assert.Equal(t, WCWRFlushErr, wcs[1].Status)
		assert.Equal(t, Err, r.q.State())
	})
	t.Run("UD", func(t *testing.T) {
		r := newSendRig(t, UD, 256)
		err := r.q.PostSend(&SendWR{Opcode: WRBindMW, BindMW: BindMW{MWRKey: 1}})
		assert.ErrorIs(t, err, ErrInvalidWR)
		assert.Empty(t, r.mem.Bound)
	})
}
