package rsocket

// wire.go: librdmacm's rsocket wire format: the connection data in the
// REQ and REP, the immediates, and the target SGL entries.

import (
	"encoding/binary"
	"errors"
	"fmt"
)

const (
	version      = 1
	flagNet      = 1 // the sender is big-endian: its SGL writes are too
	flagIOMap    = 2 // target_iomap_size is meaningful
	sglEntries   = 2 // entries of a target SGL
	sgeLen       = 16
	connDataLen  = 40
	ctrlWQEs     = 4    // send WQEs kept for control messages
	sndLowat     = 2048 // the least send space worth a message
	firstXfer    = 2048 // a Write's first message; doubles per message
	maxXfer      = 65536
	defaultQueue = 384 // librdmacm's default SQ and RQ sizes
	defaultBuf   = 1 << 17
	minQueue     = 16
)

// Message types: the immediate's top three bits.
const (
	opData  = 0
	opSGL   = 4 // credits granted (and maybe a target SGL entry written)
	opIOMap = 6 // the peer wrote an entry of our target iomap
	opCtrl  = 7
)

// Control messages.
const (
	ctrlDisconnect = 0
	ctrlKeepalive  = 1
	ctrlShutdown   = 2
)

func msg(op, data uint32) uint32 { return op<<29 | data&0x1fffffff }
func msgOp(m uint32) uint32      { return m >> 29 }
func msgData(m uint32) uint32    { return m & 0x1fffffff }

// sge is struct rs_sge: an advertised buffer.
type sge struct {
	addr   uint64
	key    uint32
	length uint32
}

// connData is struct rs_conn_data, big-endian on the wire.
type connData struct {
	flags      uint8
	credits    uint16
	iomapSize  uint8
	targetSGL  sge
	dataBuffer sge
}

func (c connData) encode() []byte {
	b := make([]byte, connDataLen)
	b[0] = version
	b[1] = c.flags
	binary.BigEndian.PutUint16(b[2:], c.credits)
	b[7] = c.iomapSize
	putSGE(b[8:], c.targetSGL, binary.BigEndian)
	putSGE(b[24:], c.dataBuffer, binary.BigEndian)
	return b
}

// ErrProtocol says the peer broke the rsocket protocol (or is not an
// rsocket); the connection is failed.
var ErrProtocol = errors.New("rsocket: protocol violation by the peer")

func decodeConnData(b []byte) (connData, error) {
	if len(b) < connDataLen {
		return connData{}, fmt.Errorf("%w: %d bytes of connection data, want %d", ErrProtocol, len(b), connDataLen)
	}
	if b[0] != version {
		return connData{}, fmt.Errorf("%w: rsocket version %d, want %d", ErrProtocol, b[0], version)
	}
	c := connData{flags: b[1], credits: binary.BigEndian.Uint16(b[2:]), iomapSize: b[7],
		targetSGL: getSGE(b[8:], binary.BigEndian), dataBuffer: getSGE(b[24:], binary.BigEndian)}
	if c.targetSGL.length == 0 {
		return connData{}, fmt.Errorf("%w: a target SGL of no entries", ErrProtocol)
	}
	return c, nil
}

func putSGE(b []byte, s sge, o binary.ByteOrder) {
	o.PutUint64(b, s.addr)
	o.PutUint32(b[8:], s.key)
	o.PutUint32(b[12:], s.length)
}

func getSGE(b []byte, o binary.ByteOrder) sge {
	return sge{addr: o.Uint64(b), key: o.Uint32(b[8:]), length: o.Uint32(b[12:])}
}

// hostBigEndian: this machine's order, which the connection data's flags
// tell the peer.
var hostBigEndian = binary.NativeEndian.Uint16([]byte{0, 1}) == 1
