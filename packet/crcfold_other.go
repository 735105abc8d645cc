//go:build !amd64

package packet

const crcFoldWide = false

func foldAVX2(crc uint32, p []byte, out *[16]byte) { panic("packet: no 256-bit fold here") }
