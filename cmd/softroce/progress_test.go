package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestProgressCountsSeedsAndFailures(t *testing.T) {
	var buf bytes.Buffer
	p := newProgress(&buf, 3, "on")
	p.step(false)
	p.step(true)
	p.step(false)
	p.done()
	assert.Contains(t, buf.String(), "[##############################] 3/3 seeds, 1 failed,")
	assert.Equal(t, byte('\n'), buf.Bytes()[buf.Len()-1])

	buf.Reset()
	p = newProgress(&buf, 2, "auto") // a bytes.Buffer is not a terminal
	p.step(true)
	p.done()
	assert.Empty(t, buf.String())
}
