package prefetch

// Read hints that b will be read soon.
func Read(b []byte) {
	if len(b) > 0 && available {
		readLines(&b[0], uintptr(len(b)))
	}
}

// Write hints that b will be written soon: the lines come in ready to be
// written (no second request for ownership when the store arrives).
func Write(b []byte) {
	if len(b) > 0 && available {
		writeLines(&b[0], uintptr(len(b)))
	}
}
