package rxe

import (
	"encoding/binary"
	"fmt"

	"github.com/softroce/softroce/qp"
)

// Limits the device enforces and reports, from rxe_param.h (Linux 6.1).
const (
	MaxQP           = 1<<20 - 16 // QPN indexes 16 .. 2^20
	MaxQPWR         = 1 << 20
	MaxSGE          = 32
	MaxSGERd        = 32
	MaxCQ           = 1 << 20
	MaxCQE          = 1<<15 - 1
	MaxMR           = 1<<19 - 1
	MaxPD           = 1 << 20
	MaxAH           = 1<<15 - 1
	MaxSRQ          = 1<<20 - 0x20001
	MaxSRQWR        = 1 << 20
	MaxSRQSGE       = 27
	MaxInline       = 512
	MaxQPRdAtom     = 128
	MaxResRdAtom    = 0x3f000
	MaxPKeys        = 64
	MaxMsgSize      = 0x800000 // port max_msg_sz; reported only, as in rxe
	LocalCAAckDelay = 15
	VendorID        = 0xFFFFFF
	PageSizeCap     = 0xfffff000
	MaxFastRegPages = 512
	// No multicast yet (rxe's are 8192, 56 and 0x70000): a device
	// reports zero groups when it has none, so that programs that need
	// multicast (pyverbs' rdmacm multicast tests, for one) see it lacks it
	// instead of failing on the first join.
	MaxMcastGrp      = 0
	MaxMcastQPAttach = 0
	MaxTotalMcastQP  = 0
)

// Device capability flags (enum ibv_device_cap_flags) the device reports:
// rxe's set minus the memory-management extensions (fast registration),
// which softroce does not implement yet.
const (
	DevCapBadPKeyCntr      = 1 << 1
	DevCapBadQKeyCntr      = 1 << 2
	DevCapAutoPathMig      = 1 << 4
	DevCapChangePhyPort    = 1 << 5
	DevCapUDAVPortEnforce  = 1 << 6
	DevCapPortActiveEvent  = 1 << 10
	DevCapSysImageGUID     = 1 << 11
	DevCapRCRNRNAKGen      = 1 << 12
	DevCapSRQResize        = 1 << 13
	DevCapMemWindow        = 1 << 17
	DevCapMemMgtExtensions = 1 << 21
	DevCapMemWindowType2B  = 1 << 24

	deviceCaps = DevCapBadPKeyCntr | DevCapBadQKeyCntr | DevCapAutoPathMig | DevCapChangePhyPort |
		DevCapUDAVPortEnforce | DevCapPortActiveEvent | DevCapSysImageGUID | DevCapRCRNRNAKGen |
		DevCapSRQResize | DevCapMemWindow | DevCapMemWindowType2B
)

// AtomicCap values (enum ibv_atomic_cap).
const (
	AtomicNone = 0
	AtomicHCA  = 1
	AtomicGlob = 2
)

// DeviceAttr mirrors struct ibv_device_attr.
type DeviceAttr struct {
	FWVer                 string
	NodeGUID              uint64 // as the wire carries it: EUI-64 bytes, big-endian
	SysImageGUID          uint64
	MaxMRSize             uint64
	PageSizeCap           uint64
	VendorID              uint32
	VendorPartID          uint32
	HWVer                 uint32
	MaxQP                 int
	MaxQPWR               int
	DeviceCapFlags        uint32
	MaxSGE                int
	MaxSGERd              int
	MaxCQ                 int
	MaxCQE                int
	MaxMR                 int
	MaxPD                 int
	MaxQPRdAtom           int
	MaxEECRdAtom          int
	MaxResRdAtom          int
	MaxQPInitRdAtom       int
	MaxEECInitRdAtom      int
	AtomicCap             int
	MaxEE                 int
	MaxRDD                int
	MaxMW                 int
	MaxRawIPv6QP          int
	MaxRawEthyQP          int
	MaxMcastGrp           int
	MaxMcastQPAttach      int
	MaxTotalMcastQPAttach int
	MaxAH                 int
	MaxFMR                int
	MaxMapPerFMR          int
	MaxSRQ                int
	MaxSRQWR              int
	MaxSRQSGE             int
	MaxPKeys              int
	LocalCAAckDelay       int
	PhysPortCnt           int
	// MaxInlineData is not in ibv_device_attr (it comes back from
	// ibv_create_qp) but is the device's limit on inline sends.
	MaxInlineData       int
	MaxFastRegPageList  int
	MaxMsgSz            int
	DeviceName          string
	LinkLayerIsEthernet bool
}

// Port states (enum ibv_port_state) and link layers.
const (
	PortDown   = 1
	PortInit   = 2
	PortArmed  = 3
	PortActive = 4

	LinkLayerEthernet = 2 // IBV_LINK_LAYER_ETHERNET

	PortCapCMSup = 1 << 16 // IBV_PORT_CM_SUP, rxe's port_cap_flags
)

// PortAttr mirrors struct ibv_port_attr.
type PortAttr struct {
	State         int
	MaxMTU        qp.MTU
	ActiveMTU     qp.MTU
	GIDTblLen     int
	PortCapFlags  uint32
	MaxMsgSz      uint32
	BadPKeyCntr   uint32 // saturates at 0xffff, as rxe's
	QKeyViolCntr  uint32
	PKeyTblLen    int
	LID           uint16
	SMLID         uint16
	LMC           uint8
	MaxVLNum      uint8
	SMSL          uint8
	SubnetTimeout uint8
	InitTypeReply uint8
	ActiveWidth   uint8
	ActiveSpeed   uint8
	PhysState     uint8
	LinkLayer     uint8
}

// ActiveMTU is rxe's eth_mtu_int_to_enum: the largest IB MTU that fits in
// linkMTU minus 80 bytes of headers (Ethernet-less IP, UDP, BTH and friends,
// ICRC), at least 256 and at most 4096. A 1500-byte link gives 1024.
func ActiveMTU(linkMTU int) qp.MTU {
	m := linkMTU - 80
	switch {
	case m >= 4096:
		return 4096
	case m >= 2048:
		return 2048
	case m >= 1024:
		return 1024
	case m >= 512:
		return 512
	}
	return 256
}

func (d *Device) buildAttrs() {
	guid := eui64(d.mac)
	g := binary.BigEndian.Uint64(guid[:])
	d.attr = DeviceAttr{
		FWVer: "softroce", NodeGUID: g, SysImageGUID: g, MaxMRSize: ^uint64(0), PageSizeCap: PageSizeCap,
		VendorID: VendorID, MaxQP: MaxQP, MaxQPWR: MaxQPWR, DeviceCapFlags: deviceCaps,
		MaxSGE: MaxSGE, MaxSGERd: MaxSGERd, MaxCQ: MaxCQ, MaxCQE: MaxCQE, MaxMR: MaxMR, MaxMW: MaxMW, MaxPD: MaxPD,
		MaxQPRdAtom: MaxQPRdAtom, MaxResRdAtom: MaxResRdAtom, MaxQPInitRdAtom: MaxQPRdAtom,
		AtomicCap: AtomicHCA, MaxMcastGrp: MaxMcastGrp, MaxMcastQPAttach: MaxMcastQPAttach,
		MaxTotalMcastQPAttach: MaxTotalMcastQP, MaxAH: MaxAH, MaxSRQ: MaxSRQ, MaxSRQWR: MaxSRQWR,
		MaxSRQSGE: MaxSRQSGE, MaxPKeys: MaxPKeys, LocalCAAckDelay: LocalCAAckDelay, PhysPortCnt: 1,
		MaxInlineData: MaxInline, MaxFastRegPageList: MaxFastRegPages, MaxMsgSz: MaxMsgSize,
		DeviceName: d.name, LinkLayerIsEthernet: true,
	}
	d.port = PortAttr{
		State: PortActive, MaxMTU: 4096, ActiveMTU: ActiveMTU(d.mtu), GIDTblLen: GIDTableLen,
		PortCapFlags: PortCapCMSup, MaxMsgSz: MaxMsgSize, PKeyTblLen: 1, MaxVLNum: 1,
		ActiveWidth: 2 /* 4X */, ActiveSpeed: 32 /* EDR */, PhysState: 5 /* LinkUp */, LinkLayer: LinkLayerEthernet,
	}
}

// QueryDevice returns the device attributes (ibv_query_device).
func (d *Device) QueryDevice() DeviceAttr { return d.attr }

// QueryPort returns the attributes of port 1, the only port
// (ibv_query_port). The P_Key and QKey violation counters are live.
func (d *Device) QueryPort(port int) (PortAttr, error) {
	if port != 1 {
		return PortAttr{}, fmt.Errorf("query port %d on %s: only port 1 exists", port, d.name)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.port
	p.BadPKeyCntr = uint32(min(d.cnt.BadPKey, 0xffff))
	p.QKeyViolCntr = uint32(min(d.cnt.BadQKey, 0xffff))
	return p, nil
}

// QueryPKey returns the P_Key at index: the table has one entry, 0xFFFF.
func (d *Device) QueryPKey(index int) (uint16, error) {
	if index != 0 {
		return 0, fmt.Errorf("query pkey %d on %s: the table has one entry", index, d.name)
	}
	return 0xFFFF, nil
}
