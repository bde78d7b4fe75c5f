package mcpserver

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestHeadTail(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		head, tail int
		in         string
		want       string
	}{
		{"empty", 4, 4, "", ""},
		{"fits", 4, 4, "abcdefgh", "abcdefgh"},
		{"only head", 4, 4, "abc", "abc"},
		{"one over", 4, 4, "abcdefghi", "abcd" + omittedMarker(1, "h") + "fghi"},
		{"long", 2, 3, strings.Repeat("x", 10) + "END", "xx" + omittedMarker(8, "h") + "END"},
		{"no tail", 3, 0, "abcdef", "abc" + omittedMarker(3, "h")},
		// "é" is 2 bytes: a cut inside it moves to its edge and the count says so.
		{"utf8 head cut", 3, 2, "abé" + "zzzz" + "yz", "ab" + omittedMarker(6, "h") + "yz"},
		{"utf8 tail cut", 2, 3, "ab" + "zzzz" + "xéy", "ab" + omittedMarker(5, "h") + "éy"},
		{"invalid bytes", 8, 8, "a\xffb", "a\uFFFDb"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := newHeadTail(tt.head, tt.tail)
			h.Write([]byte(tt.in))
			if got := h.String("h"); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if h.Total() != int64(len(tt.in)) {
				t.Errorf("total %d, want %d", h.Total(), len(tt.in))
			}
			if want := len(tt.in) > tt.head+tt.tail; h.Cut() != want {
				t.Errorf("Cut() = %v, want %v", h.Cut(), want)
			}
		})
	}
}

// TestHeadTailChunks checks that how the output arrives does not change
// what is kept, across the tail's compaction.
func TestHeadTailChunks(t *testing.T) {
	t.Parallel()
	var in bytes.Buffer
	for i := range 5000 {
		fmt.Fprintf(&in, "line %d\n", i)
	}
	whole := newHeadTail(100, 200)
	whole.Write(in.Bytes())
	for _, size := range []int{1, 7, 199, 200, 201, 4096} {
		h := newHeadTail(100, 200)
		for b := in.Bytes(); len(b) > 0; {
			n := min(size, len(b))
			h.Write(b[:n])
			b = b[n:]
		}
		if got, want := h.String(""), whole.String(""); got != want {
			t.Errorf("chunks of %d: got %q, want %q", size, got, want)
		}
		if len(h.tail) >= 2*200 {
			t.Errorf("chunks of %d: tail holds %d bytes, want < 400", size, len(h.tail))
		}
	}
	if !strings.HasSuffix(whole.String(""), "line 4999\n") || !strings.HasPrefix(whole.String(""), "line 0\n") {
		t.Errorf("lost the head or the tail: %q", whole.String(""))
	}
}

var markerRE = regexp.MustCompile(`\n\[\.\.\. (\d+) bytes omitted \.\.\.\]\n`)

func FuzzHeadTail(f *testing.F) {
	f.Add([]byte("hello, world"), 3, 4, 5)
	f.Add([]byte("héllo wörld ✓ done"), 2, 3, 1)
	f.Add([]byte{0xff, 0xe2, 0x9c, 0x93, 0x80, 'a'}, 1, 1, 2)
	f.Fuzz(func(t *testing.T, in []byte, head, tail, chunk int) {
		head, tail, chunk = abs(head)%64, abs(tail)%64, abs(chunk)%16+1
		h := newHeadTail(head, tail)
		for b := in; len(b) > 0; {
			n := min(chunk, len(b))
			h.Write(b[:n])
			b = b[n:]
		}
		got := h.String("")
		if !utf8.ValidString(got) {
			t.Fatalf("not UTF-8: %q", got)
		}
		if !h.Cut() {
			if want := strings.ToValidUTF8(string(in), "\uFFFD"); got != want {
				t.Fatalf("uncut: got %q, want %q", got, want)
			}
			return
		}
		m := markerRE.FindStringSubmatchIndex(got)
		if m == nil {
			t.Fatalf("cut output has no marker: %q", got)
		}
		omitted, _ := strconv.Atoi(got[m[2]:m[3]])
		// The kept bytes are a prefix and a suffix of the input, at most
		// utf8.UTFMax-1 short of the caps each, and the count is exact.
		keptHead := len(in[:min(head, len(in))][:completeUTF8(in[:min(head, len(in))])])
		tailBytes := in[len(in)-tail:]
		keptTail := len(tailBytes) - skipContinuation(tailBytes)
		if omitted != len(in)-keptHead-keptTail {
			t.Fatalf("omitted %d, want %d (in %d, head %d, tail %d)", omitted, len(in)-keptHead-keptTail, len(in), keptHead, keptTail)
		}
		if head-keptHead >= utf8.UTFMax || tail-keptTail >= utf8.UTFMax {
			t.Fatalf("kept %d+%d bytes of %d+%d", keptHead, keptTail, head, tail)
		}
	})
}

func abs(n int) int {
	if n < 0 {
		if n == -n {
			return 0
		}
		return -n
	}
	return n
}

func TestCompleteUTF8(t *testing.T) {
	t.Parallel()
	check := "✓" // 3 bytes
	tests := []struct {
		in   string
		want int
	}{
		{"", 0},
		{"abc", 3},
		{"a" + check, 4},
		{"a" + check[:1], 1},
		{"a" + check[:2], 1},
		{"a\xff", 2},                 // invalid, not a cut
		{"a\x80\x80\x80\x80", 5},     // continuation bytes with no start: not a cut
		{"é" + "\xf0\x9f\x98", 2},    // a 4-byte emoji missing its last byte
		{"\xf0\x9f\x98\x80", 4},      // the whole emoji
		{strings.Repeat("é", 3), 6},  // only whole characters
		{"ab" + check[:1] + "c", 4},  // invalid in the middle is left alone
		{"x" + check + check[:2], 4}, // cut after a whole one
	}
	for _, tt := range tests {
		if got := completeUTF8([]byte(tt.in)); got != tt.want {
			t.Errorf("completeUTF8(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

func TestTextOrBase64(t *testing.T) {
	t.Parallel()
	check := "✓"
	tests := []struct {
		name      string
		in        string
		atEOF     bool
		content   string
		encoding  string
		consumed  int
		roundTrip bool
	}{
		{"text", "hello\n", true, "hello\n", "text", 6, false},
		{"cut character kept for the next read", "ab" + check[:2], false, "ab", "text", 2, false},
		{"cut character at EOF is binary", "ab" + check[:2], true, "", "base64", 4, true},
		{"binary", "\x00\x01\xfe\xff", true, "", "base64", 4, true},
		{"lone partial character", check[:1], false, "", "base64", 1, true},
		{"empty", "", true, "", "text", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			content, enc, n := textOrBase64([]byte(tt.in), tt.atEOF)
			if enc != tt.encoding || n != tt.consumed {
				t.Fatalf("got %s, %d bytes; want %s, %d", enc, n, tt.encoding, tt.consumed)
			}
			if tt.roundTrip {
				b, err := base64.StdEncoding.DecodeString(content)
				if err != nil || string(b) != tt.in {
					t.Fatalf("base64 %q decodes to %q, %v; want %q", content, b, err, tt.in)
				}
			} else if content != tt.content {
				t.Fatalf("content %q, want %q", content, tt.content)
			}
		})
	}
}

func TestParseMode(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		in      string
		want    string
		wantErr bool
	}{
		{"", "----------", false},
		{"0644", "-rw-r--r--", false},
		{"755", "-rwxr-xr-x", false},
		{"4755", "urwxr-xr-x", false},
		{"0000", "", true},
		{"999", "", true},
		{"rwx", "", true},
		{"17777", "", true},
	} {
		m, err := parseMode(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("parseMode(%q) error %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if err == nil && m.String() != tt.want {
			t.Errorf("parseMode(%q) = %s, want %s", tt.in, m, tt.want)
		}
	}
}
