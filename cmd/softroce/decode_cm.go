package main

import (
	"strconv"
	"strings"

	"github.com/softroce/softroce/packet"
)

// cm prints the connection manager message a MAD on QP 1 carries: which
// message, its transaction and comm IDs, and what a reader of a connection
// setup wants (service, QPNs, PSNs, the rdma_cm addresses, the REJ
// reason). A MAD the CM does not speak is printed as its class and
// attribute.
func (d *decoder) cm(p *packet.Packet) {
	mad, ok := p.MAD()
	if !ok {
		return
	}
	if _, err := packet.ParseCMMAD(mad); err != nil {
		d.hex("mad_class", "mad_class", uint64(mad.MgmtClass()), 2)
		d.hex("mad_attr", "mad_attr", uint64(mad.AttrID()), 4)
		return
	}
	d.str("cm", "cm", mad.AttrID().String())
	d.hex64("tid", "cm_tid", mad.TID())
	msg, err := packet.DecodeCM(mad)
	if err != nil {
		return
	}
	switch m := msg.(type) {
	case *packet.CMReq:
		d.hex("lcomm", "cm_local_comm", uint64(m.LocalCommID), 8)
		d.hex64("sid", "cm_service_id", m.ServiceID)
		d.hex("lqpn", "cm_local_qpn", uint64(m.LocalQPN), 6)
		d.uint("spsn", "cm_start_psn", uint64(m.StartingPSN))
		d.uint("mtu", "cm_mtu", mtuBytes(m.PathMTU))
		d.uint("rres", "cm_resp_res", uint64(m.ResponderResources))
		d.uint("idepth", "cm_init_depth", uint64(m.InitiatorDepth))
		d.uint("retry", "cm_retry", uint64(m.RetryCount))
		d.uint("rnr", "cm_rnr_retry", uint64(m.RNRRetryCount))
		d.flag("srq", "cm_srq", m.SRQ)
		d.cma(m.ServiceID, m.PrivateData)
	case *packet.CMRep:
		d.ids(m.LocalCommID, m.RemoteCommID)
		d.hex("lqpn", "cm_local_qpn", uint64(m.LocalQPN), 6)
		d.uint("spsn", "cm_start_psn", uint64(m.StartingPSN))
		d.uint("rres", "cm_resp_res", uint64(m.ResponderResources))
		d.uint("idepth", "cm_init_depth", uint64(m.InitiatorDepth))
		d.uint("rnr", "cm_rnr_retry", uint64(m.RNRRetryCount))
		d.flag("srq", "cm_srq", m.SRQ)
	case *packet.CMRtu:
		d.ids(m.LocalCommID, m.RemoteCommID)
	case *packet.CMDreq:
		d.ids(m.LocalCommID, m.RemoteCommID)
		d.hex("rqpn", "cm_remote_qpn", uint64(m.RemoteQPN), 6)
	case *packet.CMDrep:
		d.ids(m.LocalCommID, m.RemoteCommID)
	case *packet.CMRej:
		d.ids(m.LocalCommID, m.RemoteCommID)
		d.uint("rejected", "cm_msg_rejected", uint64(m.MsgRejected))
		d.uint("reason", "cm_reason", uint64(m.Reason))
		d.str("why", "cm_reason_str", m.Reason.String())
	case *packet.CMMra:
		d.ids(m.LocalCommID, m.RemoteCommID)
		d.uint("mraed", "cm_msg_mraed", uint64(m.MsgMRAed))
		d.uint("svc_timeout", "cm_service_timeout", uint64(m.ServiceTimeout))
	case *packet.CMSidrReq:
		d.hex("reqid", "cm_request_id", uint64(m.RequestID), 8)
		d.hex64("sid", "cm_service_id", m.ServiceID)
		d.cma(m.ServiceID, m.PrivateData)
	case *packet.CMSidrRep:
		d.hex("reqid", "cm_request_id", uint64(m.RequestID), 8)
		d.uint("status", "cm_status", uint64(m.Status))
		d.hex("qpn_ud", "cm_qpn", uint64(m.QPN), 6)
		d.hex("qkey_ud", "cm_qkey", uint64(m.QKey), 8)
	}
}

// ids prints a message's two comm IDs.
func (d *decoder) ids(local, remote uint32) {
	d.hex("lcomm", "cm_local_comm", uint64(local), 8)
	d.hex("rcomm", "cm_remote_comm", uint64(remote), 8)
}

// cma prints the rdma_cm addresses of a request in an IP port space.
func (d *decoder) cma(sid uint64, pd []byte) {
	_, port, ok := packet.IPServiceID(sid)
	var h packet.CMAHeader
	if !ok || h.Decode(pd) != nil {
		return
	}
	d.key("cma", "cm_src")
	if d.json {
		d.b = append(d.b, '"')
	}
	d.b = appendHostPort(d.b, h.Src, h.SrcPort)
	if d.json {
		d.b = append(d.b, `","cm_dst":"`...)
	} else {
		d.b = append(d.b, "->"...)
	}
	d.b = appendHostPort(d.b, h.Dst, port)
	if d.json {
		d.b = append(d.b, '"')
	}
}

// str writes a string: quoted when it has a space in text, always in JSON.
func (d *decoder) str(tk, jk, s string) {
	d.key(tk, jk)
	switch {
	case d.json:
		d.b = appendJSONString(d.b, s)
	case strings.ContainsRune(s, ' '):
		d.b = strconv.AppendQuote(d.b, s)
	default:
		d.b = append(d.b, s...)
	}
}

// mtuBytes turns an IB MTU enum (1 = 256 ... 5 = 4096) into bytes; 0 for
// a value that is none.
func mtuBytes(e uint8) uint64 {
	if e < 1 || e > 5 {
		return 0
	}
	return 128 << e
}
