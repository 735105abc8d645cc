// Package archtest holds the tests that keep the repository's architecture
// true: which package may import which (ARCHITECTURE.md draws the same
// picture). It has no code of its own.
package archtest
