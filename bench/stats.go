// Package bench holds hotcell's on-demand benchmarks: each one measures
// hotcell through its public API side by side with the Docker baseline a
// user would compare it to, in the same run, and prints a summary table.
// They run only with -bench (see README.md); this file holds the pure
// helpers they share: percentiles, process memory, tables.
package bench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
)

// Summary describes a set of latency samples.
type Summary struct {
	N             int
	Min, P50, P95 time.Duration
	Max, Mean     time.Duration
}

// Summarize returns the summary of samples; it does not modify them.
func Summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return Summary{
		N:    len(s),
		Min:  s[0],
		P50:  percentileSorted(s, 50),
		P95:  percentileSorted(s, 95),
		Max:  s[len(s)-1],
		Mean: sum / time.Duration(len(s)),
	}
}

// Percentile returns the p-th percentile (0 < p <= 100) of samples by the
// nearest-rank method: the smallest sample that at least p percent of the
// samples are less than or equal to. It returns 0 for no samples.
func Percentile(samples []time.Duration, p float64) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	return percentileSorted(s, p)
}

func percentileSorted(s []time.Duration, p float64) time.Duration {
	// Nearest rank: ceil(p/100 * n), 1-based. Computed in integers of
	// hundredths of a percent so that p=95, n=20 gives rank 19 exactly
	// instead of 19.000000000000004 rounding up to 20.
	n := len(s)
	hp := int(p*100 + 0.5)
	rank := (hp*n + 9999) / 10000
	rank = max(1, min(rank, n))
	return s[rank-1]
}

// Ratio returns a/b, or 0 when b is zero.
func Ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// Ms formats d as milliseconds with three significant decimals.
func Ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(time.Millisecond), 'f', 3, 64)
}

// MiB formats a byte count as MiB with one decimal.
func MiB(n int64) string {
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64)
}

// ProcMemory is the resident memory of one process, in bytes, from
// /proc/<pid>/status.
type ProcMemory struct {
	RSS     int64 // VmRSS: everything resident, file-backed pages included
	RSSAnon int64 // RssAnon: heap and stacks, the part the process really owns
	RSSFile int64 // RssFile: mapped files such as the executable itself
}

// ReadProcMemory reads the memory of process pid.
func ReadProcMemory(pid int) (ProcMemory, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return ProcMemory{}, fmt.Errorf("read memory of pid %d: %w", pid, err)
	}
	defer f.Close()
	m, err := parseProcStatus(f)
	if err != nil {
		return ProcMemory{}, fmt.Errorf("read memory of pid %d: %w", pid, err)
	}
	return m, nil
}

// parseProcStatus reads VmRSS, RssAnon and RssFile ("VmRSS:   1234 kB")
// from the text of /proc/<pid>/status. VmRSS is required; a kernel too old
// for the Rss* lines leaves them zero.
func parseProcStatus(r io.Reader) (ProcMemory, error) {
	var m ProcMemory
	found := false
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var dst *int64
		switch key {
		case "VmRSS":
			dst, found = &m.RSS, true
		case "RssAnon":
			dst = &m.RSSAnon
		case "RssFile":
			dst = &m.RSSFile
		default:
			continue
		}
		fields := strings.Fields(val)
		if len(fields) != 2 || fields[1] != "kB" {
			return ProcMemory{}, fmt.Errorf("parse %s line %q", key, sc.Text())
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return ProcMemory{}, fmt.Errorf("parse %s line %q: %w", key, sc.Text(), err)
		}
		*dst = kb << 10
	}
	if err := sc.Err(); err != nil {
		return ProcMemory{}, err
	}
	if !found {
		return ProcMemory{}, fmt.Errorf("no VmRSS line (a kernel thread or a zombie?)")
	}
	return m, nil
}

// RSSSampler reads a process's VmRSS at a fixed interval and keeps the
// largest value seen.
type RSSSampler struct {
	stop chan struct{}
	done chan struct{}

	mu      sync.Mutex
	max     int64
	samples int
	err     error
}

// StartRSSSampler samples pid every interval until Stop. It takes one
// sample at once, so a short transfer still has one.
func StartRSSSampler(pid int, interval time.Duration) *RSSSampler {
	s := &RSSSampler{stop: make(chan struct{}), done: make(chan struct{})}
	s.sample(pid)
	go func() {
		defer close(s.done)
		tk := time.NewTicker(interval)
		defer tk.Stop()
		for {
			select {
			case <-s.stop:
				s.sample(pid)
				return
			case <-tk.C:
				s.sample(pid)
			}
		}
	}()
	return s
}

func (s *RSSSampler) sample(pid int) {
	m, err := ReadProcMemory(pid)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if s.err == nil {
			s.err = err
		}
		return
	}
	s.samples++
	s.max = max(s.max, m.RSS)
}

// Stop ends sampling and returns the largest VmRSS seen, the number of
// samples taken, and the first error, if any.
func (s *RSSSampler) Stop() (maxRSS int64, samples int, err error) {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.max, s.samples, s.err
}

// Table is a titled table of aligned columns for a benchmark's summary.
type Table struct {
	Title string
	Head  []string
	Rows  [][]string
	Notes []string
}

// Row adds a row.
func (t *Table) Row(cells ...string) { t.Rows = append(t.Rows, cells) }

// Note adds a line printed under the table.
func (t *Table) Note(format string, args ...any) {
	t.Notes = append(t.Notes, fmt.Sprintf(format, args...))
}

// String renders the table. It starts with a newline so that the table
// lines up under the benchmark's log prefix.
func (t *Table) String() string {
	var sb strings.Builder
	sb.WriteString("\n== " + t.Title + " ==\n")
	tw := tabwriter.NewWriter(&sb, 0, 0, 2, ' ', 0)
	for _, r := range append([][]string{t.Head}, t.Rows...) {
		tw.Write([]byte(strings.Join(r, "\t") + "\n"))
	}
	tw.Flush()
	for _, n := range t.Notes {
		sb.WriteString(n + "\n")
	}
	return strings.TrimSuffix(sb.String(), "\n")
}

// StepTotals are the sum (seconds) and count of one step's histogram.
type StepTotals struct {
	Sum   float64
	Count float64
}

// ParseSteps reads the hotcell_<op>_step_seconds histogram's _sum and
// _count per step out of a Prometheus text exposition. Steps appear in
// the order the exposition first names them.
func ParseSteps(text, op string) (steps []string, totals map[string]StepTotals) {
	totals = map[string]StepTotals{}
	prefix := "hotcell_" + op + "_step_seconds_"
	for line := range strings.Lines(text) {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		kind, rest, ok := strings.Cut(rest, `{step="`)
		if !ok || (kind != "sum" && kind != "count") {
			continue
		}
		step, val, ok := strings.Cut(rest, `"} `)
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(val), 64)
		if err != nil {
			continue
		}
		t, seen := totals[step]
		if !seen {
			steps = append(steps, step)
		}
		if kind == "sum" {
			t.Sum = v
		} else {
			t.Count = v
		}
		totals[step] = t
	}
	return steps, totals
}
