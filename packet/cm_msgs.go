package packet

// CMRep is a connection reply (REP), the passive side's answer to a REQ.
type CMRep struct {
	LocalCommID, RemoteCommID uint32
	LocalQKey                 uint32
	LocalQPN                  uint32 // 24 bits
	VendorID                  uint32 // 24 bits, ECE, spread over bytes 15, 19 and 23
	LocalEECN                 uint32 // 24 bits
	StartingPSN               uint32 // 24 bits
	ResponderResources        uint8
	InitiatorDepth            uint8
	TargetACKDelay            uint8 // 5 bits
	FailoverAccepted          uint8 // 2 bits
	E2EFlowControl            bool
	RNRRetryCount             uint8 // 3 bits
	SRQ                       bool
	LocalCAGUID               uint64
	PrivateData               []byte // at most CMRepPrivateLen
}

// Decode reads a REP from CM data b.
func (m *CMRep) Decode(b []byte) error {
	b, err := cmData(b)
	if err != nil {
		return err
	}
	m.LocalCommID, m.RemoteCommID, m.LocalQKey = be.Uint32(b[0:]), be.Uint32(b[4:]), be.Uint32(b[8:])
	m.LocalQPN, m.LocalEECN, m.StartingPSN = u24(b[12:]), u24(b[16:]), u24(b[20:])
	m.VendorID = uint32(b[15])<<16 | uint32(b[19])<<8 | uint32(b[23])
	m.ResponderResources, m.InitiatorDepth = b[24], b[25]
	m.TargetACKDelay, m.FailoverAccepted, m.E2EFlowControl = b[26]>>3, b[26]>>1&3, b[26]&1 != 0
	m.RNRRetryCount, m.SRQ = b[27]>>5, b[27]&0x10 != 0
	m.LocalCAGUID = be.Uint64(b[28:])
	m.PrivateData = b[36:CMDataLen]
	return nil
}

// Encode writes the REP into CM data b.
func (m *CMRep) Encode(b []byte) error {
	b, err := cmData(b)
	if err != nil {
		return err
	}
	if err := putPrivate(b[36:CMDataLen], m.PrivateData); err != nil {
		return err
	}
	be.PutUint32(b[0:], m.LocalCommID)
	be.PutUint32(b[4:], m.RemoteCommID)
	be.PutUint32(b[8:], m.LocalQKey)
	putU24(b[12:], m.LocalQPN)
	putU24(b[16:], m.LocalEECN)
	putU24(b[20:], m.StartingPSN)
	b[15], b[19], b[23] = byte(m.VendorID>>16), byte(m.VendorID>>8), byte(m.VendorID)
	b[24], b[25] = m.ResponderResources, m.InitiatorDepth
	b[26] = m.TargetACKDelay<<3 | (m.FailoverAccepted&3)<<1 | b2u(m.E2EFlowControl)
	b[27] = m.RNRRetryCount<<5 | b2u(m.SRQ)<<4
	be.PutUint64(b[28:], m.LocalCAGUID)
	return nil
}

// CMRtu is ready to use (RTU), the active side's answer to a REP.
type CMRtu struct {
	LocalCommID, RemoteCommID uint32
	PrivateData               []byte // at most CMRtuPrivateLen
}

// Decode reads an RTU from CM data b.
func (m *CMRtu) Decode(b []byte) error {
	b, err := cmData(b)
	if err == nil {
		m.LocalCommID, m.RemoteCommID, m.PrivateData = be.Uint32(b[0:]), be.Uint32(b[4:]), b[8:]
	}
	return err
}

// Encode writes the RTU into CM data b.
func (m *CMRtu) Encode(b []byte) error {
	return encodeIDsPrivate(b, m.LocalCommID, m.RemoteCommID, 8, m.PrivateData)
}

// CMDrep is a disconnection reply (DREP).
type CMDrep struct {
	LocalCommID, RemoteCommID uint32
	PrivateData               []byte // at most CMDrepPrivateLen
}

// Decode reads a DREP from CM data b.
func (m *CMDrep) Decode(b []byte) error {
	b, err := cmData(b)
	if err == nil {
		m.LocalCommID, m.RemoteCommID, m.PrivateData = be.Uint32(b[0:]), be.Uint32(b[4:]), b[8:]
	}
	return err
}

// Encode writes the DREP into CM data b.
func (m *CMDrep) Encode(b []byte) error {
	return encodeIDsPrivate(b, m.LocalCommID, m.RemoteCommID, 8, m.PrivateData)
}

// CMDreq is a disconnection request (DREQ).
type CMDreq struct {
	LocalCommID, RemoteCommID uint32
	RemoteQPN                 uint32 // 24 bits: the receiver drops a DREQ naming another QP
	PrivateData               []byte // at most CMDreqPrivateLen
}

// Decode reads a DREQ from CM data b.
func (m *CMDreq) Decode(b []byte) error {
	b, err := cmData(b)
	if err == nil {
		m.LocalCommID, m.RemoteCommID = be.Uint32(b[0:]), be.Uint32(b[4:])
		m.RemoteQPN, m.PrivateData = u24(b[8:]), b[12:]
	}
	return err
}

// Encode writes the DREQ into CM data b.
func (m *CMDreq) Encode(b []byte) error {
	if err := encodeIDsPrivate(b, m.LocalCommID, m.RemoteCommID, 12, m.PrivateData); err != nil {
		return err
	}
	putU24(b[8:], m.RemoteQPN)
	b[11] = 0
	return nil
}

// CMRej is a reject (REJ).
type CMRej struct {
	LocalCommID, RemoteCommID uint32
	MsgRejected               uint8 // 2 bits: CMMsgREQ, CMMsgREP, CMMsgOther
	RejectInfoLen             uint8 // 7 bits
	Reason                    CMRejReason
	ARI                       []byte // additional reject information, at most CMRejARILen
	PrivateData               []byte // at most CMRejPrivateLen
}

// Decode reads a REJ from CM data b.
func (m *CMRej) Decode(b []byte) error {
	b, err := cmData(b)
	if err != nil {
		return err
	}
	m.LocalCommID, m.RemoteCommID = be.Uint32(b[0:]), be.Uint32(b[4:])
	m.MsgRejected, m.RejectInfoLen = b[8]>>6, b[9]>>1
	m.Reason = CMRejReason(be.Uint16(b[10:]))
	m.ARI, m.PrivateData = b[12:84], b[84:]
	return nil
}

// Encode writes the REJ into CM data b.
func (m *CMRej) Encode(b []byte) error {
	if err := encodeIDsPrivate(b, m.LocalCommID, m.RemoteCommID, 84, m.PrivateData); err != nil {
		return err
	}
	if err := putPrivate(b[12:84], m.ARI); err != nil {
		return err
	}
	b[8], b[9] = m.MsgRejected<<6, m.RejectInfoLen<<1
	be.PutUint16(b[10:], uint16(m.Reason))
	return nil
}

// CMMra is a message receipt acknowledgement (MRA): the sender needs
// longer than the peer's response timeout to answer.
type CMMra struct {
	LocalCommID, RemoteCommID uint32
	MsgMRAed                  uint8 // 2 bits: CMMsgREQ, CMMsgREP, CMMsgOther
	ServiceTimeout            uint8 // 5 bits: 4.096 us * 2^t
	PrivateData               []byte
}

// Decode reads an MRA from CM data b.
func (m *CMMra) Decode(b []byte) error {
	b, err := cmData(b)
	if err == nil {
		m.LocalCommID, m.RemoteCommID = be.Uint32(b[0:]), be.Uint32(b[4:])
		m.MsgMRAed, m.ServiceTimeout, m.PrivateData = b[8]>>6, b[9]>>3, b[10:]
	}
	return err
}

// Encode writes the MRA into CM data b.
func (m *CMMra) Encode(b []byte) error {
	if err := encodeIDsPrivate(b, m.LocalCommID, m.RemoteCommID, 10, m.PrivateData); err != nil {
		return err
	}
	b[8], b[9] = m.MsgMRAed<<6, m.ServiceTimeout<<3
	return nil
}

// CMSidrReq is a service ID resolution request (SIDR_REQ): how an rdma_cm
// UDP id finds its peer's UD QP.
type CMSidrReq struct {
	RequestID   uint32
	PKey        uint16
	ServiceID   uint64
	PrivateData []byte // at most CMSidrReqPrivateLen
}

// Decode reads a SIDR_REQ from CM data b.
func (m *CMSidrReq) Decode(b []byte) error {
	b, err := cmData(b)
	if err == nil {
		m.RequestID, m.PKey, m.ServiceID = be.Uint32(b[0:]), be.Uint16(b[4:]), be.Uint64(b[8:])
		m.PrivateData = b[16:]
	}
	return err
}

// Encode writes the SIDR_REQ into CM data b.
func (m *CMSidrReq) Encode(b []byte) error {
	b, err := cmData(b)
	if err != nil {
		return err
	}
	if err := putPrivate(b[16:], m.PrivateData); err != nil {
		return err
	}
	be.PutUint32(b[0:], m.RequestID)
	be.PutUint16(b[4:], m.PKey)
	be.PutUint16(b[6:], 0)
	be.PutUint64(b[8:], m.ServiceID)
	return nil
}

// CMSidrRep is a service ID resolution reply (SIDR_REP).
type CMSidrRep struct {
	RequestID   uint32
	Status      uint8 // SIDRAccept, SIDRUnsupported, ...
	InfoLen     uint8
	VendorID    uint32 // 24 bits, ECE
	QPN         uint32 // 24 bits
	ServiceID   uint64
	QKey        uint32
	Info        []byte // at most CMSidrRepInfoLen
	PrivateData []byte // at most CMSidrRepPrivateLen
}

// Decode reads a SIDR_REP from CM data b.
func (m *CMSidrRep) Decode(b []byte) error {
	b, err := cmData(b)
	if err != nil {
		return err
	}
	m.RequestID, m.Status, m.InfoLen = be.Uint32(b[0:]), b[4], b[5]
	m.VendorID = uint32(be.Uint16(b[6:]))<<8 | uint32(b[11])
	m.QPN, m.ServiceID, m.QKey = u24(b[8:]), be.Uint64(b[12:]), be.Uint32(b[20:])
	m.Info, m.PrivateData = b[24:96], b[96:]
	return nil
}

// Encode writes the SIDR_REP into CM data b.
func (m *CMSidrRep) Encode(b []byte) error {
	b, err := cmData(b)
	if err != nil {
		return err
	}
	if err := putPrivate(b[96:], m.PrivateData); err != nil {
		return err
	}
	if err := putPrivate(b[24:96], m.Info); err != nil {
		return err
	}
	be.PutUint32(b[0:], m.RequestID)
	b[4], b[5] = m.Status, m.InfoLen
	be.PutUint16(b[6:], uint16(m.VendorID>>8))
	putU24(b[8:], m.QPN)
	b[11] = byte(m.VendorID)
	be.PutUint64(b[12:], m.ServiceID)
	be.PutUint32(b[20:], m.QKey)
	return nil
}

// encodeIDsPrivate writes the two comm IDs that open most messages and the
// private data from off to the end, zeroing the bytes between.
func encodeIDsPrivate(b []byte, local, remote uint32, off int, pd []byte) error {
	b, err := cmData(b)
	if err != nil {
		return err
	}
	if err := putPrivate(b[off:], pd); err != nil {
		return err
	}
	be.PutUint32(b[0:], local)
	be.PutUint32(b[4:], remote)
	clear(b[8:off])
	return nil
}
