package qp

// Counters are the transport counters, named as kernel rxe's hw_counters are,
// plus drops by cause. A device shares one Counters among its QPs.
type Counters struct {
	SentPkts            uint64 // sent_pkts
	RcvdPkts            uint64 // rcvd_pkts
	DuplicateRequest    uint64 // duplicate_request: responder saw a PSN behind expected
	OutOfSeqRequest     uint64 // out_of_seq_request: responder saw a PSN ahead of expected
	RcvdRNRErr          uint64 // rcvd_rnr_err: requester got an RNR NAK
	SendRNRErr          uint64 // send_rnr_err: responder sent an RNR NAK
	RcvdSeqErr          uint64 // rcvd_seq_err: requester got a PSN sequence error NAK
	AckDeferred         uint64 // ack_deferred
	RetryExceededErr    uint64 // retry_exceeded_err
	RetryRNRExceededErr uint64 // retry_rnr_exceeded_err
	CompleterRetryErr   uint64 // completer_retry_err: retransmissions started (timeout or NAK)
	SendErr             uint64 // send_err
	LinkDowned          uint64 // link_downed
	RdmaSends           uint64 // rdma_sends
	RdmaRecvs           uint64 // rdma_recvs
	// Drops by cause, beyond rxe's set.
	DropBadOpcode uint64 // opcode does not fit the QP's transport or state
	DropBadQKey   uint64 // UD QKey mismatch
	DropUCGap     uint64 // UC packets dropped after a PSN gap until FIRST/ONLY
	DropStale     uint64 // responses or ACKs for nothing outstanding
	DropBadLength uint64 // payload length does not fit the opcode and MTU (UC/UD)
	DropQPState   uint64 // QP not in a state that accepts the packet
	DropNoWQE     uint64 // UC/UD SEND (or WRITE with immediate) with no receive WQE posted
	DropAccess    uint64 // UC WRITE refused: QP access flags or rkey do not allow it
	DropRespBusy  uint64 // RC request dropped unprocessed: the response queue is full
	NAKsSent      uint64 // all NAKs sent, any kind
	Retransmits   uint64 // request packets sent again
	EarlyRetries  uint64 // go-back-N started by a stalled round trip, before the local ACK timeout
	// RespSuperseded counts queued response packets dropped unsent
	// because a go-back-N asked again from an earlier PSN (resp_out.go
	// supersede).
	RespSuperseded uint64
	// ReadRespKept counts READ responses kept past a gap in a READ's
	// responses, and ReadRepairs the READ requests that asked for such a
	// gap alone (read_repair.go).
	ReadRespKept uint64
	ReadRepairs  uint64
	// Congestion control, under mlx5's hw_counters names.
	NpECNMarkedRocePackets uint64 // np_ecn_marked_roce_packets: CE-marked packets received
	NpCNPSent              uint64 // np_cnp_sent
	RpCNPHandled           uint64 // rp_cnp_handled: CNPs that reached a reaction point
	RpCNPIgnored           uint64 // rp_cnp_ignored: CNPs for a QP with none (RP off, UD, not sending)
}
