package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/hotcell/hotcell/internal/termsafe"
)

// buildStep parses the engine builder's step header, "Step 3/7 : RUN make",
// into its number, the step count and the instruction.
func buildStep(line string) (n, of int, instr string, ok bool) {
	rest, found := strings.CutPrefix(line, "Step ")
	if !found {
		return 0, 0, "", false
	}
	nums, instr, found := strings.Cut(rest, " : ")
	if !found {
		return 0, 0, "", false
	}
	a, b, found := strings.Cut(nums, "/")
	if !found {
		return 0, 0, "", false
	}
	n, err1 := strconv.Atoi(a)
	of, err2 := strconv.Atoi(b)
	if err1 != nil || err2 != nil || n < 1 || of < n || of > 10_000 {
		return 0, 0, "", false
	}
	return n, of, instr, true
}

// buildDisplay shows a build's log on a terminal: the output as it comes,
// and under it one status line with the step, its instruction and the
// time it has taken, redrawn as lines arrive and every second.
type buildDisplay struct {
	w                io.Writer
	width            int
	start, stepStart time.Time
	n, of            int
	instr            string
}

func newBuildDisplay(w io.Writer, width int) *buildDisplay {
	if width < 20 {
		width = 80
	}
	now := time.Now()
	return &buildDisplay{w: w, width: width, start: now, stepStart: now}
}

// line shows one line of build output (the caller serialises calls).
func (b *buildDisplay) line(l string) {
	if n, of, instr, ok := buildStep(l); ok {
		b.n, b.of, b.instr, b.stepStart = n, of, instr, time.Now()
	}
	fmt.Fprintf(b.w, "\r\x1b[K%s\n", termsafe.String(l))
	b.status()
}

// status redraws the status line.
func (b *buildDisplay) status() {
	s := fmt.Sprintf("building %s", time.Since(b.start).Truncate(time.Second))
	if b.of > 0 {
		s = fmt.Sprintf("[%d/%d %s] %s", b.n, b.of, time.Since(b.stepStart).Truncate(time.Second), termsafe.String(b.instr))
	}
	if r := []rune(s); len(r) > b.width-1 {
		s = string(r[:b.width-2]) + "…"
	}
	fmt.Fprintf(b.w, "\r\x1b[K\x1b[1m%s\x1b[0m", s)
}

// done clears the status line and says how the build went.
func (b *buildDisplay) done(result string) {
	fmt.Fprintf(b.w, "\r\x1b[K%s in %s\n", result, time.Since(b.start).Truncate(100*time.Millisecond))
}
