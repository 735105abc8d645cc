package rxe

// UDP source ports, as rxe picks them: entropy for ECMP and RSS, one port per
// QP so that a QP's packets stay in order.

// createSrcPort is the port a QP gets at creation, before any address
// vector: 0xC000 + hash_32(qpn, 14), as rxe_qp_init_req does. UD QPs keep it.
func createSrcPort(qpn uint32) uint16 {
	const goldenRatio32 = 0x61C88647
	return 0xC000 + uint16((qpn*goldenRatio32)>>(32-14)&0x3FFF)
}

// FlowLabel is rdma_calc_flow_label: the flow label the kernel derives from
// a QP pair when the address vector carries none.
func FlowLabel(lqpn, rqpn uint32) uint32 {
	v := uint64(lqpn) * uint64(rqpn)
	v ^= v >> 20
	v ^= v >> 40
	return uint32(v & 0xFFFFF)
}

// UDPSourcePort is rdma_get_udp_sport: the UDP source port rxe gives a QP
// when modify_qp sets its address vector. A zero flow label is replaced by
// FlowLabel(lqpn, rqpn); the 20-bit label is folded to 14 bits and put in
// the 0xC000-0xFFFF range.
func UDPSourcePort(flowLabel, lqpn, rqpn uint32) uint16 {
	fl := flowLabel & 0xFFFFF
	if fl == 0 {
		fl = FlowLabel(lqpn, rqpn)
	}
	lo := fl&0x3FFF ^ (fl&0xFC000)>>14
	return uint16(lo) | 0xC000
}
