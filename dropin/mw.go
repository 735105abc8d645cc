package dropin

// mw.go: memory windows. ALLOC_MW and DEALLOC_MW manage them; they
// are bound by BIND_MW work requests in POST_SEND (bindMW), which is also
// how the library implements ibv_bind_mw, as rdma-core's rxe provider does:
// the window's next rkey is chosen by the library, so the daemon keeps no
// copy of the key the program holds.

import (
	"syscall"

	"github.com/softroce/softroce/verbsapi"
)

// allocMW answers SR_OP_ALLOC_MW with the window's handle and rkey.
func (c *conn) allocMW(b []byte) syscall.Errno {
	var r wireAllocMW
	if !decode(b, &r) || c.pds[r.PD] == nil {
		return syscall.EINVAL
	}
	// Only the types rxe has; anything else is EINVAL, as from the kernel.
	t := verbsapi.MWType(r.Type)
	if r.Type > 0xff || t != verbsapi.MWType1 && t != verbsapi.MWType2 {
		return syscall.EINVAL
	}
	mw, err := c.pds[r.PD].AllocMW(t)
	if err != nil {
		return c.errnoOf(err)
	}
	h := c.handle()
	c.mws[h] = mw
	c.w.put(wireMW{Handle: h, RKey: mw.RKey()})
	return 0
}

// deallocMW answers SR_OP_DEALLOC_MW, bound window or not.
func (c *conn) deallocMW(b []byte) syscall.Errno {
	h, ok := handleArg(b)
	if !ok || c.mws[h] == nil {
		return syscall.EINVAL
	}
	if err := c.mws[h].Dealloc(); err != nil {
		return c.errnoOf(err)
	}
	delete(c.mws, h)
	return 0
}

// bindMW fills wr's bind part from the struct sr_bind_mw at b. The device
// names the window by its rkey, and windows are the device's, not the
// connection's: so the rkey must be that of the window the handle names,
// one of the connection's, or a program could bind another program's
// window by guessing its key. The check is on the window's index (the
// rkey's upper 24 bits), which no bind changes: the key byte may lawfully
// differ from the device's at post time, when binds of the window are
// still queued ahead of this one, and the device checks the whole key
// when the bind runs.
func (c *conn) bindMW(wr *verbsapi.SendWR, b []byte) bool {
	w := getBindMW(b)
	mw := c.mws[w.MW]
	if mw == nil || w.MWRKey>>8 != mw.RKey()>>8 {
		return false
	}
	wr.BindMW = verbsapi.BindMWInfo{MWRKey: w.MWRKey, RKey: w.RKey}
	wr.BindMW.BindInfo.MRLKey = w.MRLKey
	wr.BindMW.BindInfo.Addr, wr.BindMW.BindInfo.Length = w.Addr, w.Length
	wr.BindMW.BindInfo.MWAccessFlags = verbsapi.Access(w.Access)
	return true
}
