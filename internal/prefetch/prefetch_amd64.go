package prefetch

const available = true

// readLines issues PREFETCHT0 for each 64-byte line of [p, p+n), n > 0.
//
//go:noescape
func readLines(p *byte, n uintptr)
