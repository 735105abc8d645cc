package packet

// CMPath is a REQ's primary or alternate path: on RoCE the addressing of the
// connection's data packets. Both are 44 bytes on the wire.
type CMPath struct {
	LocalLID, RemoteLID uint16 // 0xFFFF (permissive) on RoCE
	LocalGID, RemoteGID [16]byte
	FlowLabel           uint32 // 20 bits
	PacketRate          uint8  // 6 bits
	TrafficClass        uint8
	HopLimit            uint8
	SL                  uint8 // 4 bits
	SubnetLocal         bool
	LocalACKTimeout     uint8 // 5 bits: 4.096 us * 2^t
}

const cmPathLen = 44

func (p *CMPath) decode(b []byte) {
	p.LocalLID, p.RemoteLID = be.Uint16(b[0:]), be.Uint16(b[2:])
	copy(p.LocalGID[:], b[4:20])
	copy(p.RemoteGID[:], b[20:36])
	w := be.Uint32(b[36:])
	p.FlowLabel, p.PacketRate = w>>12, uint8(w&0x3F)
	p.TrafficClass, p.HopLimit = b[40], b[41]
	p.SL, p.SubnetLocal = b[42]>>4, b[42]&0x08 != 0
	p.LocalACKTimeout = b[43] >> 3
}

func (p *CMPath) encode(b []byte) {
	be.PutUint16(b[0:], p.LocalLID)
	be.PutUint16(b[2:], p.RemoteLID)
	copy(b[4:20], p.LocalGID[:])
	copy(b[20:36], p.RemoteGID[:])
	be.PutUint32(b[36:], p.FlowLabel<<12|uint32(p.PacketRate&0x3F))
	b[40], b[41] = p.TrafficClass, p.HopLimit
	b[42] = p.SL<<4 | b2u(p.SubnetLocal)<<3
	b[43] = p.LocalACKTimeout << 3
}

// CMReq is a connection request (REQ), sent by the active side.
type CMReq struct {
	LocalCommID             uint32
	VendorID                uint32 // 24 bits, ECE; 0 on rxe
	ServiceID               uint64
	LocalCAGUID             uint64
	LocalQKey               uint32
	LocalQPN                uint32 // 24 bits
	ResponderResources      uint8
	LocalEECN               uint32 // 24 bits
	InitiatorDepth          uint8
	RemoteEECN              uint32 // 24 bits
	RemoteCMResponseTimeout uint8  // 5 bits
	TransportType           uint8  // 2 bits: CMTransportRC, UC, XRC
	E2EFlowControl          bool
	StartingPSN             uint32 // 24 bits: the PSN the sender expects to receive
	LocalCMResponseTimeout  uint8  // 5 bits
	RetryCount              uint8  // 3 bits
	PKey                    uint16
	PathMTU                 uint8 // 4 bits: 1 = 256 ... 5 = 4096
	RDCExists               bool
	RNRRetryCount           uint8 // 3 bits
	MaxCMRetries            uint8 // 4 bits
	SRQ                     bool
	ExtTransportType        uint8 // 3 bits
	Primary, Alternate      CMPath
	PrivateData             []byte // at most CMReqPrivateLen
}

// Decode reads a REQ from CM data b.
func (m *CMReq) Decode(b []byte) error {
	b, err := cmData(b)
	if err != nil {
		return err
	}
	m.LocalCommID, m.VendorID = be.Uint32(b[0:]), u24(b[5:])
	m.ServiceID, m.LocalCAGUID = be.Uint64(b[8:]), be.Uint64(b[16:])
	m.LocalQKey = be.Uint32(b[28:])
	m.LocalQPN, m.ResponderResources = u24(b[32:]), b[35]
	m.LocalEECN, m.InitiatorDepth = u24(b[36:]), b[39]
	m.RemoteEECN = u24(b[40:])
	m.RemoteCMResponseTimeout, m.TransportType, m.E2EFlowControl = b[43]>>3, b[43]>>1&3, b[43]&1 != 0
	m.StartingPSN = u24(b[44:])
	m.LocalCMResponseTimeout, m.RetryCount = b[47]>>3, b[47]&7
	m.PKey = be.Uint16(b[48:])
	m.PathMTU, m.RDCExists, m.RNRRetryCount = b[50]>>4, b[50]&8 != 0, b[50]&7
	m.MaxCMRetries, m.SRQ, m.ExtTransportType = b[51]>>4, b[51]&8 != 0, b[51]&7
	m.Primary.decode(b[52:])
	m.Alternate.decode(b[96:])
	m.PrivateData = b[140:CMDataLen]
	return nil
}

// Encode writes the REQ into CM data b.
func (m *CMReq) Encode(b []byte) error {
	b, err := cmData(b)
	if err != nil {
		return err
	}
	if err := putPrivate(b[140:CMDataLen], m.PrivateData); err != nil {
		return err
	}
	be.PutUint32(b[0:], m.LocalCommID)
	b[4] = 0
	putU24(b[5:], m.VendorID)
	be.PutUint64(b[8:], m.ServiceID)
	be.PutUint64(b[16:], m.LocalCAGUID)
	be.PutUint32(b[24:], 0)
	be.PutUint32(b[28:], m.LocalQKey)
	putU24(b[32:], m.LocalQPN)
	b[35] = m.ResponderResources
	putU24(b[36:], m.LocalEECN)
	b[39] = m.InitiatorDepth
	putU24(b[40:], m.RemoteEECN)
	b[43] = m.RemoteCMResponseTimeout<<3 | (m.TransportType&3)<<1 | b2u(m.E2EFlowControl)
	putU24(b[44:], m.StartingPSN)
	b[47] = m.LocalCMResponseTimeout<<3 | m.RetryCount&7
	be.PutUint16(b[48:], m.PKey)
	b[50] = m.PathMTU<<4 | b2u(m.RDCExists)<<3 | m.RNRRetryCount&7
	b[51] = m.MaxCMRetries<<4 | b2u(m.SRQ)<<3 | m.ExtTransportType&7
	m.Primary.encode(b[52:])
	m.Alternate.encode(b[96:])
	return nil
}
