package prefetch

// Read hints that b will be read or written soon. There is no Write:
// PREFETCHW, which would fetch lines ready for writing, is not in every
// x86-64 processor (Intel's before Broadwell lack it, and a guest's CPU
// model may not offer it), and a line already in the cache takes a store
// without waiting for memory either way.
func Read(b []byte) {
	if len(b) > 0 && available {
		readLines(&b[0], uintptr(len(b)))
	}
}
