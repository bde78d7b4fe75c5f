package termsafe

import (
	"strings"
	"testing"
)

func TestEscape(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, str, text string }{
		{"plain name", "plain name", "plain name"},
		{"héllo wörld ✓", "héllo wörld ✓", "héllo wörld ✓"},
		{"", "", ""},
		{"\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`, `\x1b[31mred\x1b[0m`},
		{"\x1b]0;pwned\x07", `\x1b]0;pwned\x07`, `\x1b]0;pwned\x07`},
		{"a\x1bPq\x1b\\b", `a\x1bPq\x1b\b`, `a\x1bPq\x1b\b`},
		{"\u009b2J", `\x9b2J`, `\x9b2J`},
		{"a\tb\nc", `a\x09b\x0ac`, "a\tb\nc"},
		{"back\rspace\b", `back\x0dspace\x08`, `back\x0dspace\x08`},
		{"del\x7f", `del\x7f`, `del\x7f`},
		{"bad\xffutf8", `bad\xffutf8`, `bad\xffutf8`},
		{"file\u202egnp.exe", `file\u202egnp.exe`, `file\u202egnp.exe`},
		{"nul\x00", `nul\x00`, `nul\x00`},
	} {
		if got := String(tc.in); got != tc.str {
			t.Errorf("String(%q): got %q, want %q", tc.in, got, tc.str)
		}
		if got := Text(tc.in); got != tc.text {
			t.Errorf("Text(%q): got %q, want %q", tc.in, got, tc.text)
		}
	}
}

// TestWriter: a stream written in pieces comes out as Text of the whole,
// a rune cut between writes included.
func TestWriter(t *testing.T) {
	t.Parallel()
	in := "ok ✓\x1b[2J\r\nnext\tline ✓\xff"
	for size := 1; size <= len(in); size++ {
		var b strings.Builder
		w := NewWriter(&b)
		for i := 0; i < len(in); i += size {
			n, err := w.Write([]byte(in[i:min(i+size, len(in))]))
			if err != nil || n != min(size, len(in)-i) {
				t.Fatalf("Write: %d, %v", n, err)
			}
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		if got, want := b.String(), Text(in); got != want {
			t.Errorf("pieces of %d bytes: got %q, want %q", size, got, want)
		}
	}
	var b strings.Builder
	w := NewWriter(&b)
	w.Write([]byte("cut \xe2\x9c"))
	w.Flush()
	if got := b.String(); got != `cut \xe2\x9c` {
		t.Errorf("unfinished rune at the end: got %q", got)
	}
}
