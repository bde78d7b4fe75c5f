// Package termsafe makes strings a sandbox chose safe to print on a
// terminal. A process name, a command line, a label or a file name comes
// from code nobody has read; printed raw, an ESC or CSI sequence in it can
// rewrite the screen, retitle the window, hide lines or, on some terminals,
// answer back as typed input. The CLI prints such strings through String
// (one line, a table cell) or Text (several lines).
package termsafe

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// String returns s with every control character (C0, DEL, C1), Unicode
// bidirectional override and invalid UTF-8 byte written as a visible escape
// (\x1b, \u202e), tab and newline included: the result is one line.
func String(s string) string { return escape(s, false) }

// Text is String but keeps tab and newline, for output read as lines.
func Text(s string) string { return escape(s, true) }

func escape(s string, keepLines bool) string {
	i := strings.IndexFunc(s, func(r rune) bool { return unsafe(r, keepLines) })
	if i < 0 && utf8.ValidString(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[0])
		case unsafe(r, keepLines):
			if r < 0x100 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteString(s[:size])
		}
		s = s[size:]
	}
	return b.String()
}

func unsafe(r rune, keepLines bool) bool {
	switch {
	case keepLines && (r == '\t' || r == '\n'):
		return false
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		// Bidi embeddings, overrides, isolates and marks reorder what
		// follows them on the screen ("Trojan Source").
		return true
	}
	return false
}

// Writer writes what it is given to an underlying writer escaped as Text
// does: for a stream of a sandbox's output shown on a terminal. A UTF-8
// sequence cut between two writes is held until the next one completes
// it; Flush writes what is held.
type Writer struct {
	w    io.Writer
	tail []byte
}

// NewWriter returns a Writer to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write escapes p (and what an earlier Write held) to the underlying
// writer. It reports all of p written unless the underlying write fails.
func (s *Writer) Write(p []byte) (int, error) {
	buf := append(s.tail, p...)
	cut := len(buf)
	// At most the last 3 bytes can be the start of an unfinished rune.
	for i := len(buf) - 1; i >= 0 && i >= len(buf)-3; i-- {
		if utf8.RuneStart(buf[i]) {
			if !utf8.FullRune(buf[i:]) {
				cut = i
			}
			break
		}
	}
	s.tail = append([]byte(nil), buf[cut:]...)
	if _, err := io.WriteString(s.w, Text(string(buf[:cut]))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush writes a held partial UTF-8 sequence, escaped.
func (s *Writer) Flush() error {
	if len(s.tail) == 0 {
		return nil
	}
	_, err := io.WriteString(s.w, Text(string(s.tail)))
	s.tail = nil
	return err
}
