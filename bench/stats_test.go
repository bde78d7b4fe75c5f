package bench

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/testenv"
)

func TestPercentile(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	one20 := make([]int, 20)
	for i := range one20 {
		one20[i] = 20 - i // descending: Percentile must sort
	}
	tests := []struct {
		name    string
		samples []time.Duration
		p       float64
		want    time.Duration
	}{
		{"empty", nil, 50, 0},
		{"single", ms(7), 95, 7 * time.Millisecond},
		{"p50 of 4 is the 2nd", ms(4, 1, 3, 2), 50, 2 * time.Millisecond},
		{"p50 of 5 is the middle", ms(5, 1, 4, 2, 3), 50, 3 * time.Millisecond},
		{"p95 of 20 is the 19th", ms(one20...), 95, 19 * time.Millisecond},
		{"p100 is the max", ms(one20...), 100, 20 * time.Millisecond},
		{"tiny p is the min", ms(one20...), 0.1, 1 * time.Millisecond},
		{"p95 of 30 is the 29th", ms(seq(30)...), 95, 29 * time.Millisecond},
		{"p95 of 200 is the 190th", ms(seq(200)...), 95, 190 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := append([]time.Duration(nil), tt.samples...)
			if got := Percentile(tt.samples, tt.p); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
			for i := range in {
				if in[i] != tt.samples[i] {
					t.Fatalf("Percentile modified its input")
				}
			}
		})
	}
}

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i + 1
	}
	return out
}

func TestSummarize(t *testing.T) {
	s := Summarize([]time.Duration{4, 1, 3, 2, 10})
	want := Summary{N: 5, Min: 1, P50: 3, P95: 10, Max: 10, Mean: 4}
	if s != want {
		t.Errorf("got %+v, want %+v", s, want)
	}
	if got := Summarize(nil); got != (Summary{}) {
		t.Errorf("got %+v for no samples, want zero", got)
	}
}

func TestRatio(t *testing.T) {
	if got := Ratio(60*time.Millisecond, 2*time.Millisecond); got != 30 {
		t.Errorf("got %v, want 30", got)
	}
	if got := Ratio(time.Second, 0); got != 0 {
		t.Errorf("got %v for a zero divisor, want 0", got)
	}
}

func TestParseProcStatus(t *testing.T) {
	const status = "Name:\thotcell\nVmPeak:\t  900000 kB\nVmRSS:\t   20480 kB\nRssAnon:\t   12288 kB\nRssFile:\t    8192 kB\nThreads:\t9\n"
	m, err := parseProcStatus(strings.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	want := ProcMemory{RSS: 20 << 20, RSSAnon: 12 << 20, RSSFile: 8 << 20}
	if m != want {
		t.Errorf("got %+v, want %+v", m, want)
	}

	for name, bad := range map[string]string{
		"no VmRSS":  "Name:\tkthreadd\nThreads:\t1\n",
		"bad unit":  "VmRSS:\t20 MB\n",
		"bad count": "VmRSS:\tlots kB\n",
	} {
		if _, err := parseProcStatus(strings.NewReader(bad)); err == nil {
			t.Errorf("%s: got no error", name)
		}
	}
}

func TestReadProcMemorySelf(t *testing.T) {
	m, err := ReadProcMemory(os.Getpid())
	if err != nil {
		testenv.SkipOrFail(t, "no /proc here: %v", err)
	}
	if m.RSS <= 0 {
		t.Errorf("got RSS %d for this process, want > 0", m.RSS)
	}
	s := StartRSSSampler(os.Getpid(), time.Millisecond)
	time.Sleep(5 * time.Millisecond)
	peak, n, err := s.Stop()
	if err != nil || n < 2 || peak <= 0 {
		t.Errorf("sampler: got peak %d, %d samples, err %v; want peak > 0, >= 2 samples, no error", peak, n, err)
	}
}

func TestTable(t *testing.T) {
	tb := Table{Title: "t", Head: []string{"what", "p50"}}
	tb.Row("hotcell", "1.000")
	tb.Note("ratio %.1fx", 2.0)
	got := tb.String()
	for _, want := range []string{"== t ==", "hotcell  1.000", "ratio 2.0x"} {
		if !strings.Contains(got, want) {
			t.Errorf("table %q lacks %q", got, want)
		}
	}
}

func TestParseSteps(t *testing.T) {
	text := `# HELP hotcell_create_step_seconds Duration
# TYPE hotcell_create_step_seconds histogram
hotcell_create_step_seconds_bucket{step="agent",le="0.001"} 0
hotcell_create_step_seconds_sum{step="agent"} 0.25
hotcell_create_step_seconds_count{step="agent"} 5
hotcell_create_step_seconds_sum{step="record"} 1.5e-02
hotcell_create_step_seconds_count{step="record"} 5
hotcell_destroy_step_seconds_sum{step="agent"} 9
hotcell_destroy_step_seconds_count{step="agent"} 1
`
	steps, got := ParseSteps(text, "create")
	if want := []string{"agent", "record"}; !slices.Equal(steps, want) {
		t.Errorf("steps = %v, want %v", steps, want)
	}
	if g := got["agent"]; g.Sum != 0.25 || g.Count != 5 {
		t.Errorf("agent = %+v, want sum 0.25 count 5", g)
	}
	if g := got["record"]; g.Sum != 0.015 || g.Count != 5 {
		t.Errorf("record = %+v, want sum 0.015 count 5", g)
	}
	if _, ok := got["destroy"]; ok {
		t.Errorf("destroy's steps leaked into create's")
	}
}
