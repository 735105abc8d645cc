package qp

// doLocalOp executes a local operation WQE in queue order at the requester,
// as rxe's rxe_do_local_ops: LOCAL_INV invalidates the key it names (a
// region or a type 2 window), BIND_MW binds a memory window. The WQE is then
// done (it completes, if signaled, when it reaches the head of the queue) or
// failed, with LOC_QP_OP_ERR or MW_BIND_ERR, which moves the QP to ERR when
// it completes.
func (q *QP) doLocalOp(w *sendWQE) {
	switch w.wr.Opcode {
	case WRLocalInv:
		if err := q.cfg.Memory.Invalidate(w.wr.InvRKey, false); err != nil {
			w.state = wqeError
			w.status = WCLocQPOpErr
			return
		}
	case WRBindMW:
		if err := q.cfg.Memory.BindMW(&w.wr.BindMW); err != nil {
			w.state = wqeError
			w.status = WCMWBindErr
			return
		}
	default:
		w.state = wqeError
		w.status = WCLocQPOpErr
		return
	}
	w.state = wqeDone
	w.status = WCSuccess
	q.reqAdvance()
}
