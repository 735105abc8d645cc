package packet

// ParseFrameUnverified is ParseFrame without the IPv4 header and UDP
// checksum checks. The ICRC masks both fields, so a frame whose checksums a
// sending host left to its NIC (checksum offload: captured on that host,
// they read as wrong) can still be decoded and its ICRC checked. Receive
// paths must use ParseFrame: the kernel drops such datagrams before rxe.
func ParseFrameUnverified(b []byte, f *Frame) error { return parseFrame(b, f, false) }

// ParseIPUnverified is ParseIP without the checksum checks; see
// ParseFrameUnverified.
func ParseIPUnverified(b []byte, f *Frame) error { return parseIP(b, f, false) }
