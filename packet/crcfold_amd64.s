#include "textflag.h"

// Folding constants for the bit-reflected CRC-32 (IEEE), as in Intel's
// "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ": for a
// distance of d bits, the low quadword of a 128-bit lane is multiplied by
// x^(d+32) mod P and the high one by x^(d-32) mod P (each bit-reflected and
// shifted left by one), which moves the lane d bits further on. The
// tests derive them (TestCRCFoldConstants).
DATA fold1024<>+0(SB)/8, $0x1e88ef372
DATA fold1024<>+8(SB)/8, $0x14a7fe880
GLOBL fold1024<>(SB), RODATA, $16
DATA fold512<>+0(SB)/8, $0x154442bd4
DATA fold512<>+8(SB)/8, $0x1c6e41596
GLOBL fold512<>(SB), RODATA, $16
DATA fold256<>+0(SB)/8, $0x0f1da05aa
DATA fold256<>+8(SB)/8, $0x15a546366
GLOBL fold256<>(SB), RODATA, $16
DATA fold128<>+0(SB)/8, $0x1751997d0
DATA fold128<>+8(SB)/8, $0x0ccaa009e
GLOBL fold128<>(SB), RODATA, $16

// func foldAVX2(crc uint32, p []byte, out *[16]byte)
//
// Folds p (a multiple of 128 bytes, at least 256) into 16 bytes whose CRC
// from state 0 is the CRC of p from state crc (raw states, not inverted).
// Four 256-bit accumulators take 128 bytes a round, each 128-bit lane
// folded 1,024 bits on; at the end they fold into one lane.
TEXT ·foldAVX2(SB), NOSPLIT, $0-40
	MOVL crc+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	MOVQ out+32(FP), DI

	VMOVDQU (SI), Y1
	VMOVDQU 32(SI), Y2
	VMOVDQU 64(SI), Y3
	VMOVDQU 96(SI), Y4
	VMOVD   AX, X0 // zeroes the rest of Y0
	VPXOR   Y0, Y1, Y1
	ADDQ    $128, SI
	SUBQ    $128, CX
	VBROADCASTI128 fold1024<>(SB), Y0

loop:
	VPCLMULQDQ $0x00, Y0, Y1, Y5
	VPCLMULQDQ $0x11, Y0, Y1, Y1
	VPCLMULQDQ $0x00, Y0, Y2, Y6
	VPCLMULQDQ $0x11, Y0, Y2, Y2
	VPCLMULQDQ $0x00, Y0, Y3, Y7
	VPCLMULQDQ $0x11, Y0, Y3, Y3
	VPCLMULQDQ $0x00, Y0, Y4, Y8
	VPCLMULQDQ $0x11, Y0, Y4, Y4
	VPXOR      (SI), Y5, Y5
	VPXOR      32(SI), Y6, Y6
	VPXOR      64(SI), Y7, Y7
	VPXOR      96(SI), Y8, Y8
	VPXOR      Y5, Y1, Y1
	VPXOR      Y6, Y2, Y2
	VPXOR      Y7, Y3, Y3
	VPXOR      Y8, Y4, Y4
	ADDQ       $128, SI
	SUBQ       $128, CX
	JNZ        loop

	// 512 bits: Y1 into Y3, Y2 into Y4.
	VBROADCASTI128 fold512<>(SB), Y0
	VPCLMULQDQ $0x00, Y0, Y1, Y5
	VPCLMULQDQ $0x11, Y0, Y1, Y1
	VPCLMULQDQ $0x00, Y0, Y2, Y6
	VPCLMULQDQ $0x11, Y0, Y2, Y2
	VPXOR      Y5, Y3, Y3
	VPXOR      Y1, Y3, Y3
	VPXOR      Y6, Y4, Y4
	VPXOR      Y2, Y4, Y4

	// 256 bits: Y3 into Y4.
	VBROADCASTI128 fold256<>(SB), Y0
	VPCLMULQDQ $0x00, Y0, Y3, Y5
	VPCLMULQDQ $0x11, Y0, Y3, Y3
	VPXOR      Y5, Y4, Y4
	VPXOR      Y3, Y4, Y4

	// 128 bits: Y4's low lane into its high lane.
	VEXTRACTI128 $1, Y4, X5
	VMOVDQU      fold128<>(SB), X0
	VPCLMULQDQ   $0x00, X0, X4, X6
	VPCLMULQDQ   $0x11, X0, X4, X4
	VPXOR        X6, X5, X5
	VPXOR        X4, X5, X5
	VMOVDQU      X5, (DI)
	VZEROUPPER
	RET

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET
