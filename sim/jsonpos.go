package sim

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// decodeStrict decodes one JSON value from b into v, rejecting unknown
// fields and anything but white space after the value. Its errors start
// with the line and column they happened at ("12:5: ..."), counted as an
// editor counts them, so a user finds the typo without counting bytes.
func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return atOffset(b, int64(len(b)), fmt.Errorf("the file ends inside the scenario: %w", err))
		}
		return atOffset(b, errOffset(err, dec.InputOffset()), err)
	}
	// The decoder stops right after the value; the rest must be white space.
	end := min(int(dec.InputOffset()), len(b))
	rest := bytes.TrimLeft(b[end:], " \t\r\n")
	if len(rest) > 0 {
		return atOffset(b, int64(len(b)-len(rest)), errors.New("data after the end of the scenario (a second object, or a stray character?)"))
	}
	return nil
}

// errOffset is where a decoding error happened: the byte a syntax error
// stopped at (its Offset counts the bytes read, that one included), a type
// error's value, else the decoder's position.
func errOffset(err error, fallback int64) int64 {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return max(0, se.Offset-1)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return te.Offset
	}
	return fallback
}

// atOffset prefixes err with the line and column (both from 1) of byte
// offset off of b.
func atOffset(b []byte, off int64, err error) error {
	off = max(0, min(off, int64(len(b))))
	line := 1 + bytes.Count(b[:off], []byte{'\n'})
	col := int(off) - bytes.LastIndexByte(b[:off], '\n')
	return fmt.Errorf("%d:%d: %w", line, col, err)
}
