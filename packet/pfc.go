package packet

import "encoding/binary"

// PFC (IEEE 802.1Qbb) PAUSE frames: MAC control frames, not RoCE, but what
// a lossless RoCE network sends beside it.
const (
	// EtherTypeMACControl is the EtherType of PAUSE frames.
	EtherTypeMACControl = 0x8808
	// PFCOpcode is priority-based flow control's MAC control opcode
	// (802.3x PAUSE is 0x0001).
	PFCOpcode = 0x0101
	// PauseLen is a PAUSE frame's length without the FCS.
	PauseLen = 60
)

// pauseDst is the MAC control multicast address PAUSEs go to.
var pauseDst = [6]byte{0x01, 0x80, 0xC2, 0x00, 0x00, 0x01}

// AppendPause appends an 802.1Qbb PAUSE from src for priority prio with
// quanta (units of 512 bit times; 0 is XON): destination 01:80:C2:00:00:01,
// EtherType 0x8808, opcode 0x0101, the class-enable vector (bit prio), eight
// 16-bit pause times, zero padding to 60 bytes.
func AppendPause(dst []byte, src [6]byte, prio int, quanta uint16) []byte {
	n := len(dst)
	dst = append(dst, make([]byte, PauseLen)...)
	f := dst[n:]
	copy(f, pauseDst[:])
	copy(f[6:], src[:])
	binary.BigEndian.PutUint16(f[12:], EtherTypeMACControl)
	binary.BigEndian.PutUint16(f[14:], PFCOpcode)
	binary.BigEndian.PutUint16(f[16:], 1<<(prio&7))
	binary.BigEndian.PutUint16(f[18+2*(prio&7):], quanta)
	return dst
}

// ParsePause reads a PFC PAUSE frame: its class-enable vector (bit i:
// priority i) and the eight pause times.
func ParsePause(f []byte) (enable uint16, times [8]uint16, ok bool) {
	if len(f) < 34 || binary.BigEndian.Uint16(f[12:]) != EtherTypeMACControl || binary.BigEndian.Uint16(f[14:]) != PFCOpcode {
		return 0, times, false
	}
	enable = binary.BigEndian.Uint16(f[16:])
	for i := range times {
		times[i] = binary.BigEndian.Uint16(f[18+2*i:])
	}
	return enable, times, true
}
