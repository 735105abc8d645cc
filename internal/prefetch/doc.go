// Package prefetch asks the processor to start bringing memory into its
// caches ahead of use, without waiting for it: a hint, never a fault, and
// a no-op on an architecture without an implementation here.
//
// The transport uses it for the next packet of a long message while it
// builds or places the current one. Each packet's payload is a page of
// its own in memory that no cache holds (a 1 MiB message, sixteen of them
// in flight), and the hardware prefetcher, which stops at page
// boundaries, starts over on every one: a copy that waits for DRAM at
// every packet instead of once.
package prefetch
