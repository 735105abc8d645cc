//go:build !amd64

package packet

const crcFoldWide = false

const crcFoldMin = 256

func foldAVX2(crc uint32, p []byte, out *[16]byte) { panic("packet: no 256-bit fold here") }
