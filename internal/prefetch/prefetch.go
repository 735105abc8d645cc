package prefetch

// Read hints that b will be read soon.
func Read(b []byte) {
	if len(b) > 0 && available {
		readLines(&b[0], uintptr(len(b)))
	}
}

// Write hints that b will be written soon. It fetches the lines as Read
// does: PREFETCHW, which would fetch them ready for writing, is not in
// every x86-64 processor (Intel's before Broadwell lack it, and a guest's
// CPU model may not offer it), and a line already in the cache takes the
// store without waiting for memory either way.
func Write(b []byte) { Read(b) }
