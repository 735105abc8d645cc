package dropin

// proto.go: the wire format of libibverbs/proto.h, the protocol the
// drop-in libibverbs.so.1 speaks to the daemon. The structs mirror proto.h's
// packed structs field for field and must change with it
// (TestWireStructSizes compares their sizes with gcc's).

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"syscall"

	"github.com/softroce/softroce/verbsapi"
)

// Protocol constants (proto.h).
const (
	srNone        = 0xffffffff // "no object" in a handle field
	srMaxBody     = 1 << 20    // largest body either side accepts
	srMaxMRPieces = 64         // memfd pieces (and fds) per REG_MR
	hdrSize       = 8          // struct sr_hdr
	// srReason is SR_REASON: set in a failed answer's length, it says the
	// body is the reason's text (at most srMaxReason bytes), for the library
	// to print under SOFTROCE_DEBUG.
	srReason    = 1 << 31
	srMaxReason = 256
	// srProtoVersion is SR_PROTO_VERSION: a LIST carrying another one is
	// refused with EPROTONOSUPPORT.
	srProtoVersion = 5
)

// Operations (enum sr_op).
const (
	opList        = 1
	opQueryDevice = 2
	opQueryPort   = 3
	opQueryGID    = 4
	opQueryPKey   = 5

	opAsyncFD       = 10
	opGetAsyncEvent = 11

	opAllocPD   = 20
	opDeallocPD = 21

	opRegMR   = 30
	opDeregMR = 31
	opReregMR = 32

	opAllocMW   = 35
	opDeallocMW = 36

	opCreateCompChannel  = 40
	opDestroyCompChannel = 41
	opGetCQEvent         = 42

	opCreateCQ    = 50
	opDestroyCQ   = 51
	opResizeCQ    = 52
	opPollCQ      = 53
	opReqNotifyCQ = 54

	opCreateQP  = 60
	opModifyQP  = 61
	opQueryQP   = 62
	opDestroyQP = 63
	opPostSend  = 64
	opPostRecv  = 65
	opDoorbell  = 66

	opCreateSRQ   = 70
	opModifySRQ   = 71
	opQuerySRQ    = 72
	opDestroySRQ  = 73
	opPostSRQRecv = 74

	opCreateAH  = 80
	opDestroyAH = 81
)

// Element kinds of an async event (enum sr_elem_kind).
const (
	elemNone = 0
	elemQP   = 1
	elemCQ   = 2
	elemSRQ  = 3
	elemPort = 4
)

type wireHdr struct{ OpOrStatus, Len uint32 }

type wireHello struct{ Version uint32 }

type wireQuery struct{ Dev, Port, Index uint32 }

type wireHandle struct{ Handle uint32 }

type wireDevEntry struct {
	Name     [64]byte
	NodeGUID [8]byte
}

type wireDeviceAttr struct {
	FWVer                                            [64]byte
	NodeGUID, SysImageGUID                           [8]byte
	MaxMRSize, PageSizeCap                           uint64
	VendorID, VendorPartID, HWVer, DeviceCapFlags    uint32
	MaxQP, MaxQPWR, MaxSGE, MaxSGERd                 int32
	MaxCQ, MaxCQE, MaxMR, MaxPD                      int32
	MaxQPRdAtom, MaxEERdAtom, MaxResRdAtom           int32
	MaxQPInitRdAtom, MaxEEInitRdAtom, AtomicCap      int32
	MaxEE, MaxRDD, MaxMW, MaxRawIPv6QP, MaxRawEthyQP int32
	MaxMcastGrp, MaxMcastQPAttach, MaxTotalMcastQPAt int32
	MaxAH, MaxFMR, MaxMapPerFMR, MaxSRQ, MaxSRQWR    int32
	MaxSRQSGE                                        int32
	MaxPKeys                                         uint16
	LocalCAAckDelay, PhysPortCnt                     uint8
}

type wirePortAttr struct {
	State, MaxMTU, ActiveMTU                          uint32
	GIDTblLen                                         int32
	PortCapFlags, MaxMsgSz, BadPKeyCntr, QKeyViolCntr uint32
	PKeyTblLen, LID, SMLID                            uint16
	LMC, MaxVLNum, SMSL, SubnetTimeout, InitTypeReply uint8
	ActiveWidth, ActiveSpeed, PhysState, LinkLayer    uint8
}

type wireGID struct {
	GID  [16]byte
	Type uint32 // 0 empty, 1 RoCE v1, 2 RoCE v2
}

type wireAsyncEvent struct{ EventType, Kind, Element uint32 }

type wireRegMR struct {
	PD, Access         uint32
	Addr, Length, IOVA uint64
	NPieces, Pad       uint32
}

type wireMRPiece struct{ VAddr, Len, Offset uint64 }

type wireMR struct{ Handle, LKey, RKey uint32 }

// wireReregMR is struct sr_rereg_mr: Flags are IBV_REREG_MR_CHANGE_*, and
// PD, Access and the translation (Addr..NPieces) count only under theirs.
type wireReregMR struct {
	Handle, Flags, PD, Access uint32
	Addr, Length, IOVA        uint64
	NPieces, Pad              uint32
}

// wireAllocMW is struct sr_alloc_mw: Type is enum ibv_mw_type.
type wireAllocMW struct{ PD, Type uint32 }

type wireMW struct{ Handle, RKey uint32 }

type wireCreateCQ struct{ CQE, Channel, CompVector uint32 }

type wireCQ struct{ Handle, CQE uint32 }

type wireResizeCQ struct{ Handle, CQE uint32 }

type wireDestroyCQResp struct{ CompEvents, AsyncEvents uint32 }

type wirePollCQ struct{ Handle, Max uint32 }

type wireWC struct {
	WRID                               uint64
	Status, Opcode, VendorErr, ByteLen uint32
	ImmData, QPNum, SrcQP, WCFlags     uint32
	PKeyIndex, SLID                    uint16
	SL, DLIDPathBits                   uint8
	Pad                                [2]uint8
}

type wireReqNotify struct{ Handle, SolicitedOnly uint32 }

type wireQPCap struct{ MaxSendWR, MaxRecvWR, MaxSendSGE, MaxRecvSGE, MaxInlineData uint32 }

type wireCreateQP struct {
	PD, SendCQ, RecvCQ, SRQ uint32
	QPType, SQSigAll        uint32
	Cap                     wireQPCap
}

type wireQP struct {
	Handle, QPNum uint32
	Cap           wireQPCap
}

type wireAHAttr struct {
	DGID                                        [16]byte
	FlowLabel                                   uint32
	SGIDIndex, HopLimit, TrafficClass, IsGlobal uint8
	DLID                                        uint16
	SL, SrcPathBits, StaticRate, PortNum        uint8
	Pad                                         [2]uint8
}

type wireQPAttr struct {
	QPState, CurQPState, PathMTU, PathMigState     uint32
	QKey, RQPSN, SQPSN, DestQPNum                  uint32
	QPAccessFlags                                  uint32
	Cap                                            wireQPCap
	AHAttr                                         wireAHAttr
	PKeyIndex                                      uint16
	EnSQDAsyncNotify, SQDraining, MaxRdAtomic      uint8
	MaxDestRdAtomic, MinRNRTimer, PortNum, Timeout uint8
	RetryCnt, RNRRetry, Pad                        uint8
}

type wireModifyQP struct {
	Handle, Mask uint32
	Attr         wireQPAttr
}

type wireQueryQPResp struct {
	Attr wireQPAttr
	Init wireCreateQP
}

type wireDestroyQPResp struct{ EventsReported uint32 }

type wirePost struct{ Handle, NWR uint32 }

type wireSGE struct {
	Addr         uint64
	Length, LKey uint32
}

type wireSendWR struct {
	WRID                                       uint64
	Opcode, SendFlags, ImmData, InvalidateRKey uint32
	NumSGE, InlineLen                          uint32
	RemoteAddr                                 uint64
	RKey, Pad                                  uint32
	CompareAdd, Swap                           uint64
	AH, RemoteQPN, RemoteQKey, Pad2            uint32
}

// wireBindMW is struct sr_bind_mw, which follows a wireSendWR whose opcode
// is IBV_WR_BIND_MW: the window by handle and by the rkey the program
// knows, its new rkey, and the region by lkey.
type wireBindMW struct {
	MW, MWRKey, RKey, MRLKey uint32
	Addr, Length             uint64
	Access, Pad              uint32
}

type wireRecvWR struct {
	WRID        uint64
	NumSGE, Pad uint32
}

type wirePostResp struct{ Bad uint32 }

type wireCreateSRQ struct{ PD, MaxWR, MaxSGE, SRQLimit uint32 }

type wireSRQ struct{ Handle, MaxWR, MaxSGE, SRQLimit uint32 }

type wireModifySRQ struct{ Handle, Mask, MaxWR, SRQLimit uint32 }

type wireDestroySRQResp struct{ EventsReported uint32 }

type wireCreateAH struct {
	PD   uint32
	Attr wireAHAttr
}

// Sizes of the records the data path encodes and decodes by hand.
const (
	sizeWC     = 48
	sizeSGE    = 16
	sizeSendWR = 80
	sizeBindMW = 40
	sizeRecvWR = 16
	sizePost   = 8
)

// decode fills v from body, which must be exactly v's wire size: a short or
// long body is malformed.
func decode(body []byte, v any) bool {
	if len(body) != binary.Size(v) {
		return false
	}
	_, err := binary.Decode(body, binary.LittleEndian, v)
	return err == nil
}

// errBodyTooLong ends a connection whose peer announced a body beyond
// SR_MAX_BODY: its framing can no longer be trusted.
var errBodyTooLong = errors.New("request body exceeds SR_MAX_BODY")

// request is one call as read off the socket. fds are the descriptors that
// came with it; whoever handles the request owns (and closes) them.
type request struct {
	op   uint32
	body []byte
	fds  []int
	// truncated refuses the request: more descriptors were sent than it
	// may carry, or some came with its body rather than its header.
	truncated bool
}

// wire is one connection's framing: buffers reused from call to call so that
// the data path does not allocate.
type wire struct {
	uc  *net.UnixConn
	in  []byte // request body
	oob []byte // control messages
	out []byte // the answer: header, then body
	// reason says out's body is a failure's reason (putReason).
	reason bool
}

func newWire(uc *net.UnixConn) *wire {
	return &wire{uc: uc, oob: make([]byte, syscall.CmsgSpace(4*srMaxMRPieces)), out: make([]byte, hdrSize, 4096)}
}

// readFull reads len(p) bytes, gathering any descriptors sent along; with
// header false they are unwelcome (see collect).
func (w *wire) readFull(p []byte, r *request, header bool) error {
	for got := 0; got < len(p); {
		n, oobn, flags, _, err := w.uc.ReadMsgUnix(p[got:], w.oob)
		if oobn > 0 {
			r.collect(w.oob[:oobn], header)
		}
		if flags&syscall.MSG_CTRUNC != 0 {
			r.truncated = true
		}
		got += n
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("read request: %w", net.ErrClosed)
		}
	}
	return nil
}

// collect takes the descriptors of SCM_RIGHTS messages. The library sends a
// request's descriptors with its header, at most srMaxMRPieces: any beyond
// those, or any arriving with the body, are closed at once and refuse the
// request. Kept until the request ends, they would let a client that
// drips a body a byte at a time, each with a full load of descriptors,
// run the daemon out of them.
func (r *request) collect(oob []byte, header bool) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		r.truncated = true
		return
	}
	for i := range msgs {
		fds, err := syscall.ParseUnixRights(&msgs[i])
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if !header || len(r.fds) >= srMaxMRPieces {
				syscall.Close(fd)
				r.truncated = true
				continue
			}
			r.fds = append(r.fds, fd)
		}
	}
}

// closeFDs closes the request's descriptors: for every path that does not
// hand them on.
func (r *request) closeFDs() {
	for _, fd := range r.fds {
		syscall.Close(fd)
	}
	r.fds = r.fds[:0]
}

// read reads the next request. On error the descriptors read so far are
// closed.
func (w *wire) read(r *request) error {
	r.fds, r.truncated = r.fds[:0], false
	var hdr [hdrSize]byte
	if err := w.readFull(hdr[:], r, true); err != nil {
		r.closeFDs()
		return err
	}
	r.op = binary.LittleEndian.Uint32(hdr[0:])
	n := binary.LittleEndian.Uint32(hdr[4:])
	if n > srMaxBody {
		r.closeFDs()
		return errBodyTooLong
	}
	if cap(w.in) < int(n) {
		w.in = make([]byte, n)
	}
	r.body = w.in[:n]
	if err := w.readFull(r.body, r, false); err != nil {
		r.closeFDs()
		return err
	}
	return nil
}

// reset starts a new answer in w.out.
func (w *wire) reset() { w.out = w.out[:hdrSize] }

// put appends v's wire form to the answer body.
func (w *wire) put(v any) {
	var err error
	w.out, err = binary.Append(w.out, binary.LittleEndian, v)
	if err != nil {
		panic(fmt.Sprintf("daemon: encode %T: %v", v, err)) // a wire struct that is not fixed-size
	}
}

// putReason makes the answer a failure's reason: why as text, cut to
// srMaxReason bytes, flagged SR_REASON in the header by send.
func (w *wire) putReason(why string) {
	if len(why) > srMaxReason {
		why = why[:srMaxReason]
	}
	w.out = append(w.out[:hdrSize], why...)
	w.reason = true
}

// send writes the answer with status and, when fd >= 0, the descriptor fd
// as SCM_RIGHTS (the kernel gives the client its own copy).
func (w *wire) send(status syscall.Errno, fd int) error {
	blen := uint32(len(w.out) - hdrSize)
	if w.reason {
		blen |= srReason
		w.reason = false
	}
	binary.LittleEndian.PutUint32(w.out[0:], uint32(status))
	binary.LittleEndian.PutUint32(w.out[4:], blen)
	var oob []byte
	if fd >= 0 {
		oob = syscall.UnixRights(fd)
	}
	n, _, err := w.uc.WriteMsgUnix(w.out, oob, nil)
	if err != nil {
		return fmt.Errorf("write answer: %w", err)
	}
	if n < len(w.out) {
		// A stream socket may take a large answer in parts; the
		// descriptor went with the first.
		if _, err := w.uc.Write(w.out[n:]); err != nil {
			return fmt.Errorf("write answer: %w", err)
		}
	}
	return nil
}

// putWC appends one struct sr_wc.
func (w *wire) putWC(wc *verbsapi.WC) {
	n := len(w.out)
	w.out = append(w.out, make([]byte, sizeWC)...)
	encodeWC(w.out[n:], wc)
}

// encodeWC writes wc as one struct sr_wc into b[0:sizeWC].
func encodeWC(b []byte, wc *verbsapi.WC) {
	le := binary.LittleEndian
	_ = b[sizeWC-1]
	le.PutUint64(b[0:], wc.ID)
	le.PutUint32(b[8:], uint32(wc.Status))
	le.PutUint32(b[12:], uint32(wc.Opcode))
	le.PutUint32(b[16:], wc.VendorErr)
	le.PutUint32(b[20:], wc.ByteLen)
	// imm_data is __be32: the program reads the wire's bytes as they
	// are. invalidated_rkey (sharing the field) is a host-order number.
	if wc.Flags&verbsapi.WCWithInv != 0 {
		le.PutUint32(b[24:], wc.Imm)
	} else {
		binary.BigEndian.PutUint32(b[24:], wc.Imm)
	}
	le.PutUint32(b[28:], wc.QPN)
	le.PutUint32(b[32:], wc.SrcQP)
	le.PutUint32(b[36:], uint32(wc.Flags))
	// pkey_index, slid, sl, dlid_path_bits, pad: all zero on RoCE.
	clear(b[40:48])
}

// getSGE decodes one struct sr_sge at b[0:16].
func getSGE(b []byte) wireSGE {
	return wireSGE{
		Addr:   binary.LittleEndian.Uint64(b[0:]),
		Length: binary.LittleEndian.Uint32(b[8:]),
		LKey:   binary.LittleEndian.Uint32(b[12:]),
	}
}

// getSendWR decodes one struct sr_send_wr at b[0:80].
func getSendWR(b []byte) wireSendWR {
	le := binary.LittleEndian
	return wireSendWR{
		WRID: le.Uint64(b[0:]), Opcode: le.Uint32(b[8:]), SendFlags: le.Uint32(b[12:]),
		// imm_data is __be32, the bytes the wire carries: read in
		// network order, as the engine's Imm is.
		ImmData: binary.BigEndian.Uint32(b[16:]), InvalidateRKey: le.Uint32(b[20:]),
		NumSGE: le.Uint32(b[24:]), InlineLen: le.Uint32(b[28:]),
		RemoteAddr: le.Uint64(b[32:]), RKey: le.Uint32(b[40:]),
		CompareAdd: le.Uint64(b[48:]), Swap: le.Uint64(b[56:]),
		AH: le.Uint32(b[64:]), RemoteQPN: le.Uint32(b[68:]), RemoteQKey: le.Uint32(b[72:]),
	}
}

// getBindMW decodes one struct sr_bind_mw at b[0:40].
func getBindMW(b []byte) wireBindMW {
	le := binary.LittleEndian
	return wireBindMW{
		MW: le.Uint32(b[0:]), MWRKey: le.Uint32(b[4:]), RKey: le.Uint32(b[8:]), MRLKey: le.Uint32(b[12:]),
		Addr: le.Uint64(b[16:]), Length: le.Uint64(b[24:]), Access: le.Uint32(b[32:]),
	}
}

// getRecvWR decodes one struct sr_recv_wr at b[0:16].
func getRecvWR(b []byte) wireRecvWR {
	return wireRecvWR{WRID: binary.LittleEndian.Uint64(b[0:]), NumSGE: binary.LittleEndian.Uint32(b[8:])}
}
