package packet

import "fmt"

// Syndrome is the AETH syndrome byte: bits 6:5 give the kind (ACK, RNR NAK,
// reserved, NAK) and bits 4:0 the credit count, RNR timer code or NAK code.
type Syndrome uint8

// AckType is the kind encoded in bits 6:5 of a syndrome.
type AckType uint8

// Syndrome kinds.
const (
	AckTypeACK      AckType = 0
	AckTypeRNR      AckType = 1
	AckTypeReserved AckType = 2
	AckTypeNAK      AckType = 3
)

// NAK codes (low five bits of a NAK syndrome).
const (
	NAKPSNSequenceError     uint8 = 0
	NAKInvalidRequest       uint8 = 1
	NAKRemoteAccessError    uint8 = 2
	NAKRemoteOperationalErr uint8 = 3
	NAKInvalidRDRequest     uint8 = 4
)

// Common syndromes.
const (
	// SyndromeACKUnlimited is an ACK with the "unlimited credits" code 0x1F,
	// the only credit value rxe sends.
	SyndromeACKUnlimited Syndrome = 0x1F
	SyndromeNAKPSNSeq    Syndrome = 0x60
	SyndromeNAKInvReq    Syndrome = 0x61
	SyndromeNAKRemAccess Syndrome = 0x62
	SyndromeNAKRemOp     Syndrome = 0x63
	SyndromeNAKInvRDReq  Syndrome = 0x64
)

// MakeRNR returns an RNR NAK syndrome with the given 5-bit timer code.
func MakeRNR(timer uint8) Syndrome { return Syndrome(0x20 | timer&0x1F) }

// MakeNAK returns a NAK syndrome with the given code.
func MakeNAK(code uint8) Syndrome { return Syndrome(0x60 | code&0x1F) }

// MakeACK returns an ACK syndrome with the given 5-bit credit count.
func MakeACK(credits uint8) Syndrome { return Syndrome(credits & 0x1F) }

func (s Syndrome) Type() AckType { return AckType(s>>5) & 3 }
func (s Syndrome) Value() uint8  { return uint8(s) & 0x1F }
func (s Syndrome) IsACK() bool   { return s.Type() == AckTypeACK }
func (s Syndrome) IsRNR() bool   { return s.Type() == AckTypeRNR }
func (s Syndrome) IsNAK() bool   { return s.Type() == AckTypeNAK }

// String describes the syndrome, e.g. "ACK credits=31", "RNR timer=14",
// "NAK PSN-sequence-error".
func (s Syndrome) String() string {
	switch s.Type() {
	case AckTypeACK:
		return fmt.Sprintf("ACK credits=%d", s.Value())
	case AckTypeRNR:
		return fmt.Sprintf("RNR timer=%d", s.Value())
	case AckTypeNAK:
		switch s.Value() {
		case NAKPSNSequenceError:
			return "NAK PSN-sequence-error"
		case NAKInvalidRequest:
			return "NAK invalid-request"
		case NAKRemoteAccessError:
			return "NAK remote-access-error"
		case NAKRemoteOperationalErr:
			return "NAK remote-operational-error"
		case NAKInvalidRDRequest:
			return "NAK invalid-RD-request"
		}
		return fmt.Sprintf("NAK code=%d", s.Value())
	}
	return fmt.Sprintf("reserved 0x%02x", uint8(s))
}

// rnrTimerNanos is the IBTA RNR NAK timer table (vol. 1 table 45), in
// nanoseconds, indexed by the 5-bit timer code. Code 0 is the longest.
var rnrTimerNanos = [32]int64{
	655_360_000, 10_000, 20_000, 30_000, 40_000, 60_000, 80_000, 120_000,
	160_000, 240_000, 320_000, 480_000, 640_000, 960_000, 1_280_000, 1_920_000,
	2_560_000, 3_840_000, 5_120_000, 7_680_000, 10_240_000, 15_360_000, 20_480_000, 30_720_000,
	40_960_000, 61_440_000, 81_920_000, 122_880_000, 163_840_000, 245_760_000, 327_680_000, 491_520_000,
}

// RNRTimerNanos returns the RNR wait that a timer code asks for, in nanoseconds.
func RNRTimerNanos(code uint8) int64 { return rnrTimerNanos[code&0x1F] }
