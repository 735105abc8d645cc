#include "textflag.h"

// Both step a line at a time from p to p+n; the last line's prefetch is of
// an address inside [p, p+n). A prefetch never faults.

// func readLines(p *byte, n uintptr)
TEXT ·readLines(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ n+8(FP), CX
	ADDQ AX, CX
rloop:
	PREFETCHT0 (AX)
	ADDQ $64, AX
	CMPQ AX, CX
	JB   rloop
	RET

// func writeLines(p *byte, n uintptr)
TEXT ·writeLines(SB), NOSPLIT, $0-16
	MOVQ p+0(FP), AX
	MOVQ n+8(FP), CX
	ADDQ AX, CX
wloop:
	// PREFETCHW (AX): 0F 0D /1, which Go's assembler has no name for.
	// AMD has had it since the K6-2, Intel since Broadwell; older Intel
	// processors run it as a NOP.
	BYTE $0x0F; BYTE $0x0D; BYTE $0x08
	ADDQ $64, AX
	CMPQ AX, CX
	JB   wloop
	RET
