package verbsapi

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/netip"
)

// DefaultQKey is the QKey ModifyToInit gives UD QPs when ConnOptions names
// none: ibv_ud_pingpong's 0x11111111.
const DefaultQKey = 0x11111111

// Endpoint is what the two sides of a connection tell each other out of
// band before connecting, as ibv_rc_pingpong prints and exchanges
// "address: LID, QPN, PSN, GID" (RoCE has no LIDs).
type Endpoint struct {
	QPN uint32
	PSN uint32     // the first PSN the QP sends
	GID netip.Addr // a GID of the QP's device
}

func (e Endpoint) String() string {
	return fmt.Sprintf("QPN 0x%06x, PSN 0x%06x, GID %s", e.QPN, e.PSN, e.GID)
}

// Endpoint returns the QP's endpoint for the GID at gidIndex and the first
// PSN it will send with (use the same psn for ModifyToRTS).
func (q *QP) Endpoint(gidIndex int, psn uint32) (Endpoint, error) {
	g, err := q.pd.ctx.QueryGID(1, gidIndex)
	if err != nil {
		return Endpoint{}, fmt.Errorf("endpoint of qp %d: %w", q.QPN(), err)
	}
	return Endpoint{QPN: q.QPN(), PSN: psn & 0xFFFFFF, GID: g}, nil
}

// ConnOptions tunes ModifyToInit, ModifyToRTR and ModifyToRTS. A nil
// *ConnOptions, and every zero field, takes the default named, which follow
// ibv_rc_pingpong except where noted; use Modify for values the defaults
// hide (a zero retry count, an infinite timeout).
type ConnOptions struct {
	// Access is the remote access the QP allows (INIT); 0 means remote
	// write, read and atomic (ibv_rc_pingpong allows none, but the point of
	// softroce is RDMA).
	Access Access
	// QKey is a UD QP's QKey (INIT); 0 means DefaultQKey.
	QKey uint32
	// SGIDIndex is the local GID to send from (RTR); 0 means the first
	// GID of the remote GID's family (for IPv6, link-local only for a
	// link-local remote), which is what index 0 would mean anyway.
	SGIDIndex int
	// PathMTU (RTR); 0 means the port's active MTU.
	PathMTU MTU
	// MaxDestRdAtomic (RTR) and MaxRdAtomic (RTS) are the READ/atomic
	// requests the QP accepts and may have outstanding; 0 means 16
	// (ibv_rc_pingpong: 1).
	MaxDestRdAtomic, MaxRdAtomic uint8
	// MinRNRTimer (RTR) is the RNR NAK timer code the QP sends; 0 means 12
	// (0.64 ms).
	MinRNRTimer uint8
	// Timeout (RTS) is the local ACK timeout code, 4.096 us * 2^Timeout;
	// 0 means 14 (67 ms).
	Timeout uint8
	// RetryCnt and RNRRetry (RTS); 0 means 7 (for RNRRetry: infinite).
	RetryCnt, RNRRetry uint8
	// HopLimit, TrafficClass and FlowLabel go in the address vector (RTR);
	// a zero HopLimit means 64 (ibv_rc_pingpong: 1).
	HopLimit     uint8
	TrafficClass uint8
	FlowLabel    uint32
}

func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}

// ModifyToInit moves a QP from RESET to INIT with P_Key index 0, port 1 and,
// for RC and UC, o.Access; for UD, o.QKey.
func (q *QP) ModifyToInit(o *ConnOptions) error {
	if o == nil {
		o = &ConnOptions{}
	}
	a := QPAttr{State: QPSInit, Port: 1,
		AccessFlags: or(o.Access, AccessRemoteWrite|AccessRemoteRead|AccessRemoteAtomic),
		QKey:        or(o.QKey, DefaultQKey)}
	mask := QPAttrState | QPAttrPKeyIndex | QPAttrPort
	if q.Type() == UD {
		mask |= QPAttrQKey
	} else {
		mask |= QPAttrAccessFlags
	}
	return q.Modify(&a, mask)
}

// ModifyToRTR moves a QP from INIT to RTR. An RC or UC QP is connected to
// remote: its QPN, its first PSN and its GID. A UD QP ignores remote.
func (q *QP) ModifyToRTR(remote Endpoint, o *ConnOptions) error {
	if o == nil {
		o = &ConnOptions{}
	}
	if q.Type() == UD {
		return q.Modify(&QPAttr{State: QPSRTR}, QPAttrState)
	}
	c := q.pd.ctx
	mtu := o.PathMTU
	if mtu == 0 {
		p, err := c.QueryPort(1)
		if err != nil {
			return fmt.Errorf("modify qp %d to RTR: %w", q.QPN(), err)
		}
		mtu = p.ActiveMTU
	}
	sgid := o.SGIDIndex
	if sgid == 0 {
		var err error
		if sgid, err = c.sourceGID(remote.GID); err != nil {
			return fmt.Errorf("modify qp %d to RTR: %w", q.QPN(), err)
		}
	}
	if sgid < 0 || sgid > 255 {
		return fmt.Errorf("modify qp %d to RTR: source GID index %d: %w", q.QPN(), sgid, ErrNoGID)
	}
	a := QPAttr{State: QPSRTR, PathMTU: mtu, DestQPN: remote.QPN, RQPSN: remote.PSN,
		MaxDestRdAtomic: or(o.MaxDestRdAtomic, 16), MinRNRTimer: or(o.MinRNRTimer, 12),
		AV: AddressVector{DGID: remote.GID, SGIDIndex: uint8(sgid), HopLimit: or(o.HopLimit, 64),
			TrafficClass: o.TrafficClass, FlowLabel: o.FlowLabel}}
	mask := QPAttrState | QPAttrAV | QPAttrPathMTU | QPAttrDestQPN | QPAttrRQPSN
	if q.Type() == RC {
		mask |= QPAttrMaxDestRdAtomic | QPAttrMinRNRTimer
	}
	return q.Modify(&a, mask)
}

// ModifyToRTS moves a QP from RTR to RTS, sending from PSN psn.
func (q *QP) ModifyToRTS(psn uint32, o *ConnOptions) error {
	if o == nil {
		o = &ConnOptions{}
	}
	a := QPAttr{State: QPSRTS, SQPSN: psn & 0xFFFFFF, Timeout: or(o.Timeout, 14),
		RetryCnt: or(o.RetryCnt, 7), RNRRetry: or(o.RNRRetry, 7), MaxRdAtomic: or(o.MaxRdAtomic, 16)}
	mask := QPAttrState | QPAttrSQPSN
	if q.Type() == RC {
		mask |= QPAttrTimeout | QPAttrRetryCnt | QPAttrRNRRetry | QPAttrMaxQPRdAtomic
	}
	return q.Modify(&a, mask)
}

// Connect moves a QP in RESET through INIT and RTR to RTS: ModifyToInit,
// ModifyToRTR(remote) and ModifyToRTS(psn), stopping at the first error.
func (q *QP) Connect(psn uint32, remote Endpoint, o *ConnOptions) error {
	if err := q.ModifyToInit(o); err != nil {
		return err
	}
	if err := q.ModifyToRTR(remote, o); err != nil {
		return err
	}
	return q.ModifyToRTS(psn, o)
}

// sourceGID picks the local GID to reach dgid from: the first of its
// address family, link-local only for a link-local destination.
func (c *Context) sourceGID(dgid netip.Addr) (int, error) {
	dst := dgid.Unmap()
	if !dst.IsValid() {
		return 0, fmt.Errorf("remote endpoint has no GID: %w", ErrInvalid)
	}
	for i, g := range c.dev.GIDs() {
		ip := g.Unmap()
		if ip.Is4() != dst.Is4() {
			continue
		}
		if ip.Is6() && ip.IsLinkLocalUnicast() != dst.IsLinkLocalUnicast() {
			continue
		}
		return i, nil
	}
	return 0, fmt.Errorf("no local GID of the family of %s: %w", dst, ErrNoGID)
}

// RandomPSN returns a random 24-bit starting PSN, as the pingpongs and
// perftest pick theirs (lrand48() & 0xffffff).
func RandomPSN() uint32 {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint32(b[:]) & 0xffffff
}
