package rxe

import "github.com/softroce/softroce/qp"

// Counters is a snapshot of the device's counters: the transport counters
// its QPs share (named as rxe's hw_counters) and the device's own receive
// and transmit drops by cause.
type Counters struct {
	qp.Counters

	// Receive drops, in the order the receive path checks them.
	NotRoCE         uint64 // not IPv4/IPv6 UDP to port 4791
	Malformed       uint64 // truncated, IP options, fragment, bad lengths, bad BTH
	BadDGID         uint64 // destination IP is none of our GIDs (rxe_chk_dgid)
	UnknownOpcode   uint64 // opcode rxe does not know
	CNP             uint64 // congestion notification packets (0x81), all: rp_cnp_handled + rp_cnp_ignored reached a QP
	UnknownQP       uint64 // no QP with the BTH destination QPN
	GSIDropped      uint64 // packets to QP 1 that are not UD SEND ONLY
	Multicast       uint64 // packets to the multicast QPN, not implemented
	QPNotReady      uint64 // QP in RESET or INIT
	AddrMismatch    uint64 // RC/UC source or destination IP differ from the QP's AV (rxe check_addr)
	BadPKey         uint64 // P_Key does not match 0xFFFF (bad_pkey_cntr)
	BadQKey         uint64 // UD DETH QKey differs from the QP's (qkey_viol_cntr)
	BadICRC         uint64 // ICRC wrong (for any IPv4 ID, when the link lost the ID)
	LoopbackPackets uint64 // packets delivered to our own GIDs without the link
	// GSI counts MADs received on QP 1 and handed to the connection
	// manager (they count in rcvd_pkts too).
	GSI uint64
	// CMRetransmits counts the connection manager's MADs sent again after
	// their timeout (REQ, REP, DREQ, SIDR_REQ).
	CMRetransmits uint64
	// ICRCIDUnknown counts packets accepted although their IPv4 ID was
	// unknown (a UDP-socket link): their ICRC was checked on 15 bits only.
	ICRCIDUnknown uint64

	// Transmit side.
	TxNoRoute     uint64 // no source GID for the AV, or address families differ
	TxLinkErrors  uint64 // link.Send failures (frames lost; RC retransmits)
	RxLinkErrors  uint64 // link.Recv failures other than close
	EventsDropped uint64 // async events lost because nobody read the channel
	// RNRRetriesHeld counts RNR retries held past their QP's RNR timer for
	// a slot of the device's RNR retry budget (Config.RNRRetryRate).
	RNRRetriesHeld uint64
}

// Counter is one named counter value.
type Counter struct {
	Name  string
	Value uint64
}

// List returns the counters as name/value pairs in a stable order: rxe's
// hw_counters first, under rxe's names, then softroce's own.
func (c *Counters) List() []Counter {
	t := &c.Counters
	return []Counter{
		{"sent_pkts", t.SentPkts},
		{"rcvd_pkts", t.RcvdPkts},
		{"duplicate_request", t.DuplicateRequest},
		{"out_of_seq_request", t.OutOfSeqRequest},
		{"rcvd_rnr_err", t.RcvdRNRErr},
		{"send_rnr_err", t.SendRNRErr},
		{"rcvd_seq_err", t.RcvdSeqErr},
		{"ack_deferred", t.AckDeferred},
		{"retry_exceeded_err", t.RetryExceededErr},
		{"retry_rnr_exceeded_err", t.RetryRNRExceededErr},
		{"completer_retry_err", t.CompleterRetryErr},
		{"send_err", t.SendErr},
		{"link_downed", t.LinkDowned},
		{"rdma_sends", t.RdmaSends},
		{"rdma_recvs", t.RdmaRecvs},
		{"bad_pkey_cntr", c.BadPKey},
		{"qkey_viol_cntr", c.BadQKey},
		{"drop_bad_opcode", t.DropBadOpcode},
		{"drop_bad_qkey_qp", t.DropBadQKey},
		{"drop_uc_gap", t.DropUCGap},
		{"drop_stale", t.DropStale},
		{"drop_bad_length", t.DropBadLength},
		{"drop_qp_state", t.DropQPState},
		{"naks_sent", t.NAKsSent},
		{"retransmits", t.Retransmits},
		{"early_retries", t.EarlyRetries},
		{"resp_superseded", t.RespSuperseded},
		{"read_resp_kept", t.ReadRespKept},
		{"read_repairs", t.ReadRepairs},
		{"np_ecn_marked_roce_packets", t.NpECNMarkedRocePackets},
		{"np_cnp_sent", t.NpCNPSent},
		{"rp_cnp_handled", t.RpCNPHandled},
		{"rp_cnp_ignored", t.RpCNPIgnored},
		{"rx_not_roce", c.NotRoCE},
		{"rx_malformed", c.Malformed},
		{"rx_bad_dgid", c.BadDGID},
		{"rx_unknown_opcode", c.UnknownOpcode},
		{"rx_cnp", c.CNP},
		{"rx_unknown_qp", c.UnknownQP},
		{"rx_gsi", c.GSI},
		{"rx_gsi_dropped", c.GSIDropped},
		{"cm_retransmits", c.CMRetransmits},
		{"rx_multicast", c.Multicast},
		{"rx_qp_not_ready", c.QPNotReady},
		{"rx_addr_mismatch", c.AddrMismatch},
		{"rx_bad_icrc", c.BadICRC},
		{"rx_icrc_id_unknown", c.ICRCIDUnknown},
		{"loopback_pkts", c.LoopbackPackets},
		{"tx_no_route", c.TxNoRoute},
		{"tx_link_errors", c.TxLinkErrors},
		{"rx_link_errors", c.RxLinkErrors},
		{"events_dropped", c.EventsDropped},
		{"rnr_retries_held", c.RNRRetriesHeld},
	}
}

// Counters returns a snapshot of the device's counters.
func (d *Device) Counters() Counters {
	d.mu.Lock()
	defer d.mu.Unlock()
	c := d.cnt
	c.Counters = d.qpCnt
	c.CMRetransmits = d.gsi.cm.Counters().Retransmits
	return c
}
