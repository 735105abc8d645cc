package dropin

// post.go: the data path (POST_SEND, POST_RECV, POST_SRQ_RECV,
// POLL_CQ). Requests are decoded by hand into per-connection scratch
// values: no allocation per work request or completion.

import (
	"encoding/binary"
	"syscall"

	"github.com/softroce/softroce/verbsapi"
)

// maxPoll caps one POLL_CQ: enough for any CQ a program polls in one go,
// and an answer well under SR_MAX_BODY.
const maxPoll = 4096

func (c *conn) pollCQ(b []byte) syscall.Errno {
	var r wirePollCQ
	if !decode(b, &r) || c.cqs[r.Handle] == nil {
		return syscall.EINVAL
	}
	max := int(min(r.Max, maxPoll))
	if cap(c.wcs) < max {
		c.wcs = make([]verbsapi.WC, max)
	}
	n, err := c.cqs[r.Handle].cq.Poll(c.wcs[:max])
	if err != nil {
		return c.errnoOf(err)
	}
	for i := range n {
		c.w.putWC(&c.wcs[i])
	}
	return 0
}

// postFail answers a post that stopped at WR bad with errno.
func (c *conn) postFail(bad int, errno syscall.Errno) syscall.Errno {
	c.w.put(wirePostResp{Bad: uint32(bad)})
	return errno
}

// walkWRs checks the framing of nwr work requests in b, each a fixed
// record of size head whose extra(record) bytes follow it, and returns
// the most SGEs any one has. Nothing is posted from a malformed body.
func walkWRs(b []byte, nwr uint32, head int, extra func([]byte) (sges, bytes uint64)) (maxSGE int, ok bool) {
	if uint64(nwr) > uint64(len(b)/head) {
		return 0, false
	}
	for range nwr {
		if len(b) < head {
			return 0, false
		}
		sges, inl := extra(b[:head])
		need := sges*sizeSGE + inl
		if need > uint64(len(b)-head) {
			return 0, false
		}
		maxSGE = max(maxSGE, int(sges))
		b = b[head+int(need):]
	}
	return maxSGE, len(b) == 0
}

// sgl decodes n SGEs at b into the scratch list.
func (c *conn) sgl(b []byte, n int) []verbsapi.SGE {
	s := c.sges[:n]
	for i := range s {
		w := getSGE(b[i*sizeSGE:])
		s[i] = verbsapi.SGE{Addr: w.Addr, Length: w.Length, LKey: w.LKey}
	}
	return s
}

func (c *conn) growSGEs(n int) {
	if cap(c.sges) < n {
		c.sges = make([]verbsapi.SGE, n)
	}
}

func (c *conn) postSend(b []byte) syscall.Errno {
	if len(b) < sizePost {
		return c.postFail(0, syscall.EINVAL)
	}
	h, nwr := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
	q := c.qps[h]
	if q == nil {
		return c.postFail(0, syscall.EINVAL)
	}
	// What the program put in the QP's send ring goes first; while some
	// of it waits for room, the queue is full.
	if q.rings != nil && q.rings.sq.pending() {
		return c.postFail(0, syscall.ENOMEM)
	}
	if bad, errno := c.postSendWRs(q, b[sizePost:], nwr); errno != 0 {
		return c.postFail(bad, errno)
	}
	c.w.put(wirePostResp{})
	return 0
}

// sendRecord is walkWRs' measure of one struct sr_send_wr: its SGEs, and
// its inline data or the struct sr_bind_mw that follows a bind.
func sendRecord(r []byte) (sges, bytes uint64) {
	extra := uint64(binary.LittleEndian.Uint32(r[28:]))
	if binary.LittleEndian.Uint32(r[8:]) == uint32(verbsapi.WRBindMW) {
		extra += sizeBindMW
	}
	return uint64(binary.LittleEndian.Uint32(r[24:])), extra
}

// postSendWRs posts the nwr send WRs of b (laid out as in a POST_SEND body
// after its struct sr_post) to q; on failure it returns the index of the
// WR that was not posted and why. Nothing is posted from a malformed b.
func (c *conn) postSendWRs(q *connQP, b []byte, nwr uint32) (int, syscall.Errno) {
	maxSGE, ok := walkWRs(b, nwr, sizeSendWR, sendRecord)
	if !ok {
		return 0, syscall.EINVAL
	}
	c.growSGEs(maxSGE)
	ud := q.qp.Type() == verbsapi.UD
	wr := &c.sendWR
	for i := range int(nwr) {
		w := getSendWR(b)
		b = b[sizeSendWR:]
		nsge := int(w.NumSGE)
		*wr = verbsapi.SendWR{ID: w.WRID, Opcode: verbsapi.WROpcode(w.Opcode), Flags: verbsapi.SendFlags(w.SendFlags),
			SGL: c.sgl(b, nsge), Imm: w.ImmData, InvRKey: w.InvalidateRKey,
			RemoteAddr: w.RemoteAddr, RKey: w.RKey, CompareAdd: w.CompareAdd, Swap: w.Swap}
		b = b[nsge*sizeSGE:]
		inline := wr.Flags&verbsapi.SendInline != 0
		bind := w.Opcode == uint32(verbsapi.WRBindMW)
		switch {
		case w.Opcode > 0xff:
			return i, syscall.EINVAL
		case bind && (nsge > 0 || w.InlineLen > 0):
			// A bind carries its struct sr_bind_mw and nothing else.
			return i, syscall.EINVAL
		case w.InlineLen > 0 && !inline, inline && nsge > 0:
			// The library gathers inline data itself: never both.
			return i, syscall.EINVAL
		}
		if bind {
			ok := c.bindMW(wr, b)
			b = b[sizeBindMW:]
			if !ok {
				return i, syscall.EINVAL
			}
			inline = false // the engine ignores the flag on a bind
		}
		if inline {
			wr.SGL, wr.Inline = nil, b[:w.InlineLen]
			b = b[w.InlineLen:]
		}
		if ud {
			ah := c.ahs[w.AH]
			if ah == nil {
				return i, syscall.EINVAL
			}
			wr.AH, wr.RemoteQPN, wr.RemoteQKey = ah.AV(), w.RemoteQPN, w.RemoteQKey
		}
		if err := q.qp.PostSend(wr); err != nil {
			return i, c.errnoOf(err)
		}
	}
	return 0, 0
}

// postRecv posts to a QP's receive queue or, with srq, to an SRQ.
func (c *conn) postRecv(b []byte, srq bool) syscall.Errno {
	if len(b) < sizePost {
		return c.postFail(0, syscall.EINVAL)
	}
	h, nwr := binary.LittleEndian.Uint32(b), binary.LittleEndian.Uint32(b[4:])
	var post func(*verbsapi.RecvWR) error
	switch {
	case srq && c.srqs[h] != nil:
		post = c.srqs[h].srq.PostRecv
	case !srq && c.qps[h] != nil:
		post = c.qps[h].qp.PostRecv
	default:
		return c.postFail(0, syscall.EINVAL)
	}
	if s := c.srqs[h]; srq && s.ring != nil && s.ring.pending() {
		s.srq.RefillRecv()
		if s.ring.pending() {
			return c.postFail(0, syscall.ENOMEM)
		}
	}
	if q := c.qps[h]; !srq && q.rings != nil && q.rings.rq != nil && q.rings.rq.pending() {
		// The receive ring goes first; what the queue has no room for
		// makes it full.
		q.qp.RefillRecv()
		if q.rings.rq.pending() {
			return c.postFail(0, syscall.ENOMEM)
		}
	}
	if bad, errno := c.postRecvWRs(post, b[sizePost:], nwr); errno != 0 {
		return c.postFail(bad, errno)
	}
	c.w.put(wirePostResp{})
	return 0
}

// recvRecord is walkWRs' measure of one struct sr_recv_wr.
func recvRecord(r []byte) (sges, bytes uint64) {
	return uint64(binary.LittleEndian.Uint32(r[8:])), 0
}

// postRecvWRs posts the nwr receive WRs of b (as in a POST_RECV body after
// its struct sr_post) with post; on failure it returns the index of the WR
// that was not posted and why.
func (c *conn) postRecvWRs(post func(*verbsapi.RecvWR) error, b []byte, nwr uint32) (int, syscall.Errno) {
	maxSGE, ok := walkWRs(b, nwr, sizeRecvWR, recvRecord)
	if !ok {
		return 0, syscall.EINVAL
	}
	c.growSGEs(maxSGE)
	wr := &c.recvWR
	for i := range int(nwr) {
		w := getRecvWR(b)
		b = b[sizeRecvWR:]
		nsge := int(w.NumSGE)
		*wr = verbsapi.RecvWR{ID: w.WRID, SGL: c.sgl(b, nsge)}
		b = b[nsge*sizeSGE:]
		if err := post(wr); err != nil {
			return i, c.errnoOf(err)
		}
	}
	return 0, 0
}
