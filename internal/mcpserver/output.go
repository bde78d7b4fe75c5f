package mcpserver

import (
	"encoding/base64"
	"fmt"
	"strings"
	"unicode/utf8"
)

// headTail keeps the first headCap and the last tailCap bytes written to it
// and counts everything, so a command's output of any size is held in
// bounded memory and can still be shown with its beginning (what ran) and
// its end (usually the error) and an exact count of what was left out.
type headTail struct {
	headCap, tailCap int
	head, tail       []byte
	total            int64
}

func newHeadTail(headCap, tailCap int) *headTail {
	return &headTail{headCap: headCap, tailCap: tailCap}
}

func (h *headTail) Write(p []byte) (int, error) {
	n := len(p)
	h.total += int64(n)
	if room := h.headCap - len(h.head); room > 0 {
		k := min(room, len(p))
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	if len(p) == 0 || h.tailCap == 0 {
		return n, nil
	}
	h.tail = append(h.tail, p...)
	// Trim only when twice the cap is reached, so that copying the kept
	// tail to the front costs amortised O(1) a byte.
	if len(h.tail) >= 2*h.tailCap {
		h.tail = append(h.tail[:0], h.tail[len(h.tail)-h.tailCap:]...)
	}
	return n, nil
}

// Cut reports whether String leaves bytes out.
func (h *headTail) Cut() bool { return h.total > int64(h.headCap+h.tailCap) }

// Total returns how many bytes were written.
func (h *headTail) Total() int64 { return h.total }

// String returns the output as text: whole if it fit, else its head and
// tail around a marker saying how many bytes were left out and how to see
// them. Cuts fall on UTF-8 boundaries; bytes that are not UTF-8 become
// U+FFFD.
func (h *headTail) String(hint string) string {
	tail := h.tail
	if len(tail) > h.tailCap {
		tail = tail[len(tail)-h.tailCap:]
	}
	if h.total == int64(len(h.head)+len(tail)) {
		return strings.ToValidUTF8(string(h.head)+string(tail), "\uFFFD")
	}
	head := h.head[:completeUTF8(h.head)]
	tail = tail[skipContinuation(tail):]
	omitted := h.total - int64(len(head)) - int64(len(tail))
	return strings.ToValidUTF8(string(head), "\uFFFD") + omittedMarker(omitted, hint) + strings.ToValidUTF8(string(tail), "\uFFFD")
}

func omittedMarker(n int64, hint string) string {
	if hint != "" {
		hint = "; " + hint
	}
	return fmt.Sprintf("\n[... %d bytes omitted%s ...]\n", n, hint)
}

// completeUTF8 returns the length of b without a UTF-8 sequence cut off at
// its end, so that a chunk boundary does not turn a character into U+FFFD.
// Invalid bytes are left alone: they are not a cut.
func completeUTF8(b []byte) int {
	// A sequence is at most utf8.UTFMax bytes: look back that far for the
	// start byte of the last one.
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		c := b[i]
		if c < utf8.RuneSelf {
			return len(b) // ASCII: nothing is cut
		}
		if utf8.RuneStart(c) {
			if !utf8.FullRune(b[i:]) {
				return i
			}
			return len(b)
		}
	}
	return len(b)
}

// skipContinuation returns how many leading bytes of b continue a
// character that started before b (at most utf8.UTFMax-1).
func skipContinuation(b []byte) int {
	i := 0
	for i < len(b) && i < utf8.UTFMax-1 && !utf8.RuneStart(b[i]) {
		i++
	}
	return i
}

// textOrBase64 decides how to return file bytes to an agent: as text when
// they are UTF-8 (after dropping a character cut off at the end, whose
// bytes the next read starts with), else as base64. It returns the content,
// the encoding and how many bytes of data it represents.
func textOrBase64(data []byte, atEOF bool) (content, encoding string, n int) {
	n = len(data)
	if !atEOF {
		n = completeUTF8(data)
		if n == 0 && len(data) > 0 {
			n = len(data) // too short to hold a whole character: not text
		}
	}
	if utf8.Valid(data[:n]) {
		return string(data[:n]), "text", n
	}
	return base64.StdEncoding.EncodeToString(data), "base64", len(data)
}

// omittedCount says how many items a list leaves out.
func omittedCount(n int, what string) string {
	return fmt.Sprintf("%d more %s not shown", n, what)
}
