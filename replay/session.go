package replay

import (
	"fmt"
	"net/netip"

	"github.com/softroce/softroce/qp"
	"github.com/softroce/softroce/rxe"
)

// Access the rebuilt host's QP and remote-accessible memory allow.
const (
	remoteAll = qp.AccessRemoteWrite | qp.AccessRemoteRead | qp.AccessRemoteAtomic
	memAll    = qp.AccessLocalWrite | remoteAll
	depth     = 4096 // work requests and completions per queue
	// maxRebuild bounds the memory one rebuilt region or read buffer may
	// take: a capture is input, and a forged RETH must not make the replay
	// allocate gigabytes.
	maxRebuild = 64 << 20
)

// region is memory of the host that the peer's RETHs and AtomicETHs address.
type region struct {
	rkey     uint32
	lo, hi   uint64
	init     []byte // initial contents, from what the host's responses say
	expected []byte // contents after the peer's requests
	mr       *rxe.MR
	// touched marks bytes the peer has written or updated so far in the
	// walk: the host's application may change the others between the
	// peer's reads (see session.beforeRead).
	touched []bool
}

// posted is a host message turned into a send work request.
type posted struct {
	msg   *message
	wr    qp.SendWR
	local []byte // the local buffer: the data sent, or where results land
}

// session is the rebuilt host: a device, one QP, its memory and work.
type session struct {
	flow       *Flow
	host, peer Side
	opt        Options
	mtu        qp.MTU

	fromHost, fromPeer []*Frame
	hostMsgs, peerMsgs []*message

	d        *rxe.Device
	pd       *rxe.PD
	scq, rcq *rxe.CQ
	x        *rxe.QP
	regions  map[uint32]*region
	recvBufs [][]byte
	recvFor  []*Frame // UD: the datagram each receive buffer is for
	sent     []*posted
	wrs      map[*Frame]*posted  // by the message's first frame
	peerMsg  map[*Frame]*message // the peer's messages by first frame
	// appWrites counts bytes the host's application must have changed
	// between the peer's reads.
	appWrites int
	// notes are what the replay inferred from the capture (Result.Notes).
	notes []string
	// lazyRecv posts receives as the capture shows them taken rather than
	// all at first, since the host's queue ran empty (RNR NAKs);
	// recvPosted counts the receives posted, recvTaken the PSNs they were
	// posted for.
	lazyRecv   bool
	recvPosted int
	recvTaken  map[uint32]bool
}

// note records an inference, "" for none.
func (s *session) note(n string) {
	if n != "" {
		s.notes = append(s.notes, n)
	}
}

// newSession rebuilds the host of f at addr.
func newSession(f *Flow, addr netip.Addr, o Options) (*session, error) {
	host, peer, ok := f.Side(addr)
	if !ok {
		return nil, fmt.Errorf("%s is not an end of flow %s", addr, f)
	}
	s := &session{flow: f, host: host, peer: peer, opt: o, mtu: pathMTU(f.Frames),
		regions: map[uint32]*region{}, wrs: map[*Frame]*posted{}}
	for _, c := range f.Frames {
		if c.Src == host.Addr {
			s.fromHost = append(s.fromHost, c)
		} else {
			s.fromPeer = append(s.fromPeer, c)
		}
	}
	reqs := func(fs []*Frame) []*Frame {
		var out []*Frame
		for _, c := range fs {
			if !isResponse(&c.Pkt) {
				out = append(out, c)
			}
		}
		return out
	}
	s.hostMsgs, s.peerMsgs = messages(reqs(s.fromHost)), firstSends(messages(reqs(s.fromPeer)))
	s.peerMsg = map[*Frame]*message{}
	for _, m := range s.peerMsgs {
		s.peerMsg[m.first] = m
	}
	if o.ResponderOnly {
		s.hostMsgs = nil
	}
	if err := s.device(); err != nil {
		return nil, fmt.Errorf("replay %s as %s: %w", f, host, err)
	}
	var err error
	if f.Type == qp.UD {
		err = s.connectUD()
	} else {
		err = s.connect()
	}
	if err == nil {
		err = s.memory()
	}
	if err == nil {
		err = s.work()
	}
	if err != nil {
		return nil, fmt.Errorf("replay %s as %s: %w", f, host, err)
	}
	return s, nil
}

// device creates the device with the host's addresses and a QP with the
// host's QPN: QPNs are handed out in order, so QPs are created until it
// comes up.
func (s *session) device() error {
	cfg := rxe.Config{Name: "rxe0", MTU: 1500, Seed: 1} // kernel rxe's retransmission timing
	if len(s.fromHost) > 0 {
		cfg.MAC = s.fromHost[0].MAC
	}
	if cfg.MAC == ([6]byte{}) {
		cfg.MAC = [6]byte{0x02, 0, 0, 0, 0, 1}
	}
	if s.host.Addr.Is4() {
		cfg.IPv4 = s.host.Addr
	} else {
		cfg.IPv6 = s.host.Addr
	}
	var err error
	if s.d, err = rxe.New(cfg); err != nil {
		return err
	}
	if s.pd, err = s.d.AllocPD(); err != nil {
		return err
	}
	if s.scq, err = s.d.CreateCQ(depth); err != nil {
		return err
	}
	if s.rcq, err = s.d.CreateCQ(depth); err != nil {
		return err
	}
	// A fresh device hands out QPNs in order from the first: placeholders,
	// created and destroyed at once, move it up to the host's QPN.
	if s.host.QPN > rxe.MaxQP+16 {
		return fmt.Errorf("QP %#x cannot be created: softroce's QPNs end at %#x", s.host.QPN, rxe.MaxQP+16)
	}
	newQP := func(n int) (*rxe.QP, error) {
		return s.d.CreateQP(s.pd, rxe.QPInit{Type: s.flow.Type, SendCQ: s.scq, RecvCQ: s.rcq,
			Cap: rxe.QPCap{MaxSendWR: n, MaxRecvWR: n, MaxSendSGE: 1, MaxRecvSGE: 1}})
	}
	if s.x, err = newQP(depth); err != nil {
		return fmt.Errorf("create QP %#x: %w", s.host.QPN, err)
	}
	if s.x.QPN() < s.host.QPN {
		if err := s.d.DestroyQP(s.x); err != nil {
			return err
		}
		for p := s.x; p.QPN()+1 < s.host.QPN; {
			if p, err = newQP(1); err != nil {
				return fmt.Errorf("create QP %#x: %w", s.host.QPN, err)
			}
			if err := s.d.DestroyQP(p); err != nil {
				return err
			}
		}
		if s.x, err = newQP(depth); err != nil {
			return fmt.Errorf("create QP %#x: %w", s.host.QPN, err)
		}
	}
	if s.x.QPN() != s.host.QPN {
		return fmt.Errorf("QP %#x cannot be created: softroce's QPNs start at %#x", s.host.QPN, s.x.QPN())
	}
	return nil
}

// connect takes an RC or UC QP to RTS as the host's was: the peer's QPN,
// both first PSNs, the path MTU, hop limit and traffic class of its frames.
func (s *session) connect() error {
	sgid := s.d.GIDIndex(s.host.Addr)
	var ttl, tos uint8 = 64, 0
	if len(s.fromHost) > 0 {
		ttl, tos = s.fromHost[0].TTL, s.fromHost[0].TOS
	}
	init := qp.Attr{State: qp.Init, Port: 1, AccessFlags: remoteAll}
	if err := s.x.Modify(&init, qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrAccessFlags); err != nil {
		return err
	}
	// Read/atomic depths as deep as the capture shows: the host's
	// requests outstanding (initiator depth) and the peer's it answered
	// (responder resources).
	initDepth, why := depthFor(s.flow.Frames, s.host.Addr, int(s.mtu), "initiator depth")
	s.note(why)
	respDepth, why := depthFor(s.flow.Frames, s.peer.Addr, int(s.mtu), "responder resources")
	s.note(why)
	rtr := qp.Attr{State: qp.RTR, PathMTU: s.mtu, DestQPN: s.peer.QPN, MaxDestRdAtomic: uint8(respDepth), MinRNRTimer: 12,
		AV: qp.AddressVector{DGID: s.peer.Addr, SGIDIndex: uint8(sgid), HopLimit: ttl, TrafficClass: tos}}
	if len(s.fromHost) > 0 {
		// rdma_cm gives the AV a flow label (from the connection request),
		// and rxe derives the UDP source port from it; a label that folds
		// to the captured port gives the same port. Without one the port
		// comes from the QPNs, as ibv_*_pingpong's.
		sport := s.fromHost[0].SrcPort
		if sport != rxe.UDPSourcePort(0, s.host.QPN, s.peer.QPN) && sport&0x3FFF != 0 {
			rtr.AV.FlowLabel = uint32(sport & 0x3FFF)
		}
	}
	if m := firstRequest(s.fromPeer); m != nil {
		rtr.RQPSN = m.Pkt.BTH.PSN
	}
	rtrMask := qp.AttrState | qp.AttrAV | qp.AttrPathMTU | qp.AttrDestQPN | qp.AttrRQPSN
	rts := qp.Attr{State: qp.RTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: uint8(initDepth)}
	if m := firstRequest(s.fromHost); m != nil {
		rts.SQPSN = m.Pkt.BTH.PSN
	}
	rtsMask := qp.AttrState | qp.AttrSQPSN
	if s.flow.Type == qp.RC {
		rtrMask |= qp.AttrMaxDestRdAtomic | qp.AttrMinRNRTimer
		rtsMask |= qp.AttrTimeout | qp.AttrRetryCnt | qp.AttrRNRRetry | qp.AttrMaxQPRdAtomic
	}
	if err := s.x.Modify(&rtr, rtrMask); err != nil {
		return fmt.Errorf("modify QP %#x to RTR: %w", s.host.QPN, err)
	}
	if err := s.x.Modify(&rts, rtsMask); err != nil {
		return fmt.Errorf("modify QP %#x to RTS: %w", s.host.QPN, err)
	}
	return nil
}

// connectUD takes a UD QP to RTS with the QKey the peer's datagrams carry
// and the first PSN of the host's.
func (s *session) connectUD() error {
	var qkey, psn uint32
	for _, c := range s.fromPeer {
		qkey = c.Pkt.DETH.QKey
		break
	}
	if len(s.fromHost) > 0 {
		psn = s.fromHost[0].Pkt.BTH.PSN
	}
	if err := s.x.Modify(&qp.Attr{State: qp.Init, Port: 1, QKey: qkey},
		qp.AttrState|qp.AttrPKeyIndex|qp.AttrPort|qp.AttrQKey); err != nil {
		return err
	}
	if err := s.x.Modify(&qp.Attr{State: qp.RTR}, qp.AttrState); err != nil {
		return err
	}
	return s.x.Modify(&qp.Attr{State: qp.RTS, SQPSN: psn}, qp.AttrState|qp.AttrSQPSN)
}

func firstRequest(fs []*Frame) *Frame {
	for _, c := range fs {
		if !isResponse(&c.Pkt) {
			return c
		}
	}
	return nil
}
