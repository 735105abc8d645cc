// Package verbsapi is softroce's user API: the verbs of libibverbs, in Go,
// over a softroce device (package rxe). Names and shapes follow libibverbs
// so that code ported from C, and people who know verbs, find their way:
//
//	libibverbs                          verbsapi
//	(rdma link add rxe0 type rxe ...)   NewDevice(name, LinkConfig), NewDevicePair / Device.Close
//	ibv_get_device_list                 Devices (devices this process Registered)
//	ibv_open_device / ibv_close_device  Device.Open, Open(name), OpenDevice(*rxe.Device) / Context.Close
//	ibv_query_device, ibv_query_port    Context.QueryDevice, Context.QueryPort
//	ibv_query_gid, ibv_query_gid_table  Context.QueryGID, Context.QueryGIDTable
//	ibv_alloc_pd / ibv_dealloc_pd       Context.AllocPD / PD.Dealloc
//	ibv_reg_mr(_iova) / ibv_dereg_mr    PD.RegMR, PD.RegMRIOVA / MR.Dereg (MR.LKey, RKey, Addr, Len)
//	ibv_create_comp_channel             Context.CreateCompChannel
//	ibv_create_cq / ibv_destroy_cq      Context.CreateCQ(cqe, channel) / CQ.Destroy
//	ibv_poll_cq                         CQ.Poll([]WC) (n, error)
//	ibv_req_notify_cq                   CQ.ReqNotify(solicitedOnly)
//	ibv_get_cq_event / ibv_ack_cq_events CompChannel.GetEvent(ctx) / AckEvents; CQ.Wait, CQ.PollWait without a channel
//	ibv_create_qp / ibv_destroy_qp      PD.CreateQP(QPInitAttr) / QP.Destroy
//	ibv_modify_qp / ibv_query_qp        QP.Modify(*QPAttr, QPAttrMask) / QP.Query
//	ibv_post_send / ibv_post_recv       QP.PostSend(*SendWR), QP.PostSendList / QP.PostRecv(*RecvWR)
//	ibv_create_srq / ibv_modify_srq     PD.CreateSRQ / SRQ.ModifyLimit, SRQ.PostRecv, SRQ.Destroy
//	ibv_create_ah / ibv_destroy_ah      PD.CreateAH(AHAttr) / AH.Destroy; SendWR.AH = ah.AV()
//	ibv_get_async_event                 Context.GetAsyncEvent(ctx), Context.PollAsyncEvent (per context)
//	(spinning on a volatile byte)       MR.WaitByte(ctx, off, v), MR.Load: wait for a remote WRITE
//	(drain before close)                Context.Flush(ctx): the device sends what its QPs owe
//
// The work request, completion, attribute and flag types are the transport
// engine's (package qp), re-exported here as aliases (SendWR, RecvWR, SGE,
// WC, QPAttr, the IBV_* constants as WCSuccess, QPAttrState, AccessRemoteRead
// and so on), as are the device's (PortActive, AtomicHCA, DevCap*), so a user
// imports verbsapi only: NewDevice builds a device on a udp, tap or mem link
// from a LinkConfig, and the examples use nothing else. A work request is one Go
// value, not a linked list; PostSendList posts several and reports the index
// of the first that failed, as bad_wr does.
//
// Connecting a QP takes the three ibv_modify_qp calls every verbs program
// writes; ModifyToInit, ModifyToRTR and ModifyToRTS (or Connect, all three)
// make them with ibv_rc_pingpong's defaults, from an Endpoint (QPN, PSN and
// GID) that the two sides exchange out of band. Or the connection manager
// does it, as librdmacm's rdma_connect and rdma_accept: Context.ListenCM,
// CMListener.Accept and ConnRequest.Accept on one side, Context.DialCM on the
// other (CM MADs on the device's QP 1; the peer may be kernel rxe), then
// CMConn.Disconnect. A UD QP is found the same way through SIDR:
// Context.ListenUD and UDRequest.Reply on one side, Context.ResolveUD (its
// QPN and Q_Key) on the other. CMPort gives the device's connection manager to a
// consumer that keeps its own rdma_cm state (the drop-in librdmacm's
// server); one router goroutine per device hands the manager's events to
// their owners while any exist.
//
// Errors are Go errors that say what was done to which object and why,
// wrapping sentinels for errors.Is: posting on a QP in RESET, INIT or RTR
// gives "post send SEND on qp 17: qp in INIT: ..." (ErrQPState); a Modify
// without an attribute its transition requires names it ("modify qp 17
// INIT->RTR: RC requires IBV_QP_PATH_MTU", ErrInvalidAttr); destroying a PD,
// CQ, SRQ or completion channel still in use fails with ErrBusy. Failures of
// the transport itself (a bad key, a remote access violation) arrive as
// completions with an error status and, for the QP, an asynchronous event,
// as in verbs.
//
// Unlike libibverbs, blocking waits take a context.Context, and objects are
// garbage collected: no event needs acknowledging for memory safety. A
// Context keeps track of what it created, and Close destroys what is left.
package verbsapi
