package packet

import "golang.org/x/sys/cpu"

// foldAVX2 folds p, a multiple of 128 bytes and at least 256, into 16
// bytes whose CRC-32 from raw state 0 is p's from raw state crc, with
// 256-bit carry-less multiplies (crcfold_amd64.s).
//
//go:noescape
func foldAVX2(crc uint32, p []byte, out *[16]byte)

func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// crcFoldWide is whether UpdateCRC32 folds with foldAVX2: the processor
// has 256-bit carry-less multiplies (VPCLMULQDQ, CPUID leaf 7 ECX bit 10,
// with AVX2 and the operating system's support for its registers) but not
// the AVX-512 ones hash/crc32 uses itself for 1 KiB and more. Otherwise
// hash/crc32 folds 128 bits at a time. On the AMD EPYC (Zen 3) this was
// measured on, the fold takes a 4 KiB payload at 22 GB/s against 11
// (BenchmarkUpdateCRC32), and the simulator's incast-dcqcn-pfc, whose
// 4 KiB frames each get an ICRC, runs 8% faster. Valgrind's processor has
// no VPCLMULQDQ, so under it (bench/simcost.sh) the 128-bit path counts.
var crcFoldWide = func() bool {
	if !cpu.X86.HasAVX2 || cpu.X86.HasAVX512VPCLMULQDQ {
		return false
	}
	if maxLeaf, _, _, _ := cpuid(0, 0); maxLeaf < 7 {
		return false
	}
	_, _, ecx, _ := cpuid(7, 0)
	return ecx&(1<<10) != 0
}()
