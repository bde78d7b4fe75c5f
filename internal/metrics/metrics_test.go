package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// fakeStatter answers from a script of readings per sandbox.
type fakeStatter struct {
	mu    sync.Mutex
	reads map[string][]driver.Stats
}

func (f *fakeStatter) Stats(ctx context.Context, id string) (driver.Stats, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.reads[id]
	if len(r) == 0 {
		return driver.Stats{}, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrConflict)
	}
	f.reads[id] = r[1:]
	return r[0], nil
}

func TestSamplerCPU(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(5000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ns := func(ms int) uint64 { return uint64(ms) * 1e6 }
	tests := []struct {
		name  string
		reads []driver.Stats
		want  []float64 // percent per sample
		wins  []int64   // window ms per sample
	}{
		{"first has no window", []driver.Stats{{Read: at(0), CPUUsageNs: ns(100)}}, []float64{0}, []int64{0}},
		{"first uses the driver's previous sample",
			[]driver.Stats{{Read: at(1000), CPUUsageNs: ns(600), PreRead: at(0), PreCPUUsageNs: ns(100)}}, []float64{50}, []int64{1000}},
		{"half a core, then two cores",
			[]driver.Stats{{Read: at(0), CPUUsageNs: 0}, {Read: at(1000), CPUUsageNs: ns(500)}, {Read: at(1500), CPUUsageNs: ns(1500)}},
			[]float64{0, 50, 200}, []int64{0, 1000, 500}},
		{"a reading right after another averages over the older window",
			[]driver.Stats{{Read: at(0), CPUUsageNs: 0}, {Read: at(1000), CPUUsageNs: ns(1000)}, {Read: at(1010), CPUUsageNs: ns(1010)}},
			[]float64{0, 100, 100}, []int64{0, 1000, 1010}},
		{"counters reset on restart",
			[]driver.Stats{{Read: at(0), CPUUsageNs: ns(5000)}, {Read: at(1000), CPUUsageNs: ns(10)}, {Read: at(2000), CPUUsageNs: ns(260)}},
			[]float64{0, 0, 25}, []int64{0, 0, 1000}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSampler(&fakeStatter{reads: map[string][]driver.Stats{"a": tt.reads}})
			for i := range tt.reads {
				st, err := s.Sample(t.Context(), wire.Sandbox{ID: "a", Limits: wire.Limits{CPUs: 0.5}})
				if err != nil {
					t.Fatal(err)
				}
				if math.Abs(st.CPU.Percent-tt.want[i]) > 1e-9 || st.CPU.WindowMs != tt.wins[i] {
					t.Errorf("sample %d: got %.3f%% over %dms, want %.3f%% over %dms", i, st.CPU.Percent, st.CPU.WindowMs, tt.want[i], tt.wins[i])
				}
				if st.CPU.LimitCpus != 0.5 || st.ID != "a" {
					t.Errorf("sample %d: limit %v id %q", i, st.CPU.LimitCpus, st.ID)
				}
			}
		})
	}
}

func TestSamplerFields(t *testing.T) {
	t.Parallel()
	read := time.Unix(7, 0)
	s := NewSampler(&fakeStatter{reads: map[string][]driver.Stats{"a": {{
		Read: read, CPUUsageNs: 9, MemoryBytes: 100, MemoryLimitBytes: 200, Pids: 3, PidsLimit: 50, NetRxBytes: 11, NetTxBytes: 12,
	}}}})
	got, err := s.Sample(t.Context(), wire.Sandbox{ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	want := wire.SandboxStats{
		ID: "a", Time: read.UTC(),
		CPU:     wire.CPUStats{UsageNs: 9},
		Memory:  wire.MemoryStats{UsageBytes: 100, LimitBytes: 200},
		Pids:    wire.PidsStats{Current: 3, Limit: 50},
		Network: wire.NetworkStats{RxBytes: 11, TxBytes: 12},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if _, err := s.Sample(t.Context(), wire.Sandbox{ID: "a"}); !errors.Is(err, errdefs.ErrConflict) {
		t.Errorf("driver error: got %v, want it passed through", err)
	}
}

func scrape(t *testing.T, d *Daemon) string {
	t.Helper()
	rec := httptest.NewRecorder()
	d.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func TestDaemonMetrics(t *testing.T) {
	t.Parallel()
	sbs := []wire.Sandbox{
		{ID: "run1", State: wire.StateRunning},
		{ID: "run2", State: wire.StateRunning},
		{ID: "gone", State: wire.StateRunning}, // stats fail: skipped and counted
		{ID: "stop1", State: wire.StateStopped},
	}
	sampler := NewSampler(&fakeStatter{reads: map[string][]driver.Stats{
		"run1": {{Read: time.Now(), CPUUsageNs: 2e9, MemoryBytes: 1 << 20, Pids: 4, NetRxBytes: 10, NetTxBytes: 20}},
		"run2": {{Read: time.Now(), MemoryBytes: 2 << 20, Pids: 1}},
	}})
	d := New(Options{
		Sandboxes:   func(context.Context) ([]wire.Sandbox, error) { return sbs, nil },
		Stats:       sampler.Sample,
		Concurrency: 1,
	})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/sandboxes", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(201) })
	mux.HandleFunc("POST /v1/sandboxes/{id}/exec", func(w http.ResponseWriter, r *http.Request) {})
	mux.HandleFunc("DELETE /v1/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(409) })
	for _, req := range []struct{ method, path string }{
		{"POST", "/v1/sandboxes"}, {"POST", "/v1/sandboxes/a/exec"}, {"POST", "/v1/sandboxes/b/exec"}, {"DELETE", "/v1/sandboxes/a"},
	} {
		r := httptest.NewRequest(req.method, req.path, nil)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, r)
		d.ObserveRequest(r, rec.Code, 3*time.Millisecond)
	}
	d.ObserveRequest(httptest.NewRequest("GET", "/v1/x", nil), 401, time.Millisecond)
	d.ObserveStep("create", "agent", 2*time.Millisecond)
	d.ObserveStep("destroy", "egress", 4*time.Millisecond)
	d.ObserveStep("pause", "agent", time.Second) // not an op with steps: ignored

	out := scrape(t, d)
	for _, want := range []string{
		`hotcell_sandboxes{state="running"} 3`,
		`hotcell_sandboxes{state="stopped"} 1`,
		`hotcell_sandboxes{state="paused"} 0`,
		`hotcell_sandbox_memory_bytes{sandbox="run1"} 1.048576e+06`,
		`hotcell_sandbox_memory_bytes{sandbox="run2"} 2.097152e+06`,
		`hotcell_sandbox_cpu_seconds_total{sandbox="run1"} 2`,
		`hotcell_sandbox_pids{sandbox="run1"} 4`,
		`hotcell_sandbox_network_receive_bytes_total{sandbox="run1"} 10`,
		`hotcell_sandbox_network_transmit_bytes_total{sandbox="run1"} 20`,
		`hotcell_sandbox_cpu_percent{sandbox="run1"} 0`,
		`hotcell_sandbox_stats_scrape_errors 1`,
		`hotcell_sandbox_creates_total{result="ok"} 1`,
		`hotcell_sandbox_destroys_total{result="error"} 1`,
		`hotcell_execs_total{result="ok"} 2`,
		`hotcell_exec_duration_seconds_count 2`,
		`hotcell_http_requests_total{code="201",method="POST",route="/v1/sandboxes"} 1`,
		`hotcell_http_requests_total{code="200",method="POST",route="/v1/sandboxes/{id}/exec"} 2`,
		`hotcell_http_requests_total{code="401",method="GET",route="none"} 1`,
		`hotcell_create_step_seconds_count{step="agent"} 1`,
		`hotcell_create_step_seconds_sum{step="agent"} 0.002`,
		`hotcell_destroy_step_seconds_count{step="egress"} 1`,
		`go_goroutines `,
		`process_resident_memory_bytes `,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	for _, bad := range []string{`sandbox="stop1"`, `sandbox="gone"`, `/v1/sandboxes/a`, `hotcell_pause_step`} {
		if strings.Contains(out, bad) {
			t.Errorf("metrics contain %q", bad)
		}
	}
}

func TestCollectorTimeout(t *testing.T) {
	t.Parallel()
	var sbs []wire.Sandbox
	for i := range 20 {
		sbs = append(sbs, wire.Sandbox{ID: fmt.Sprint("s", i), State: wire.StateRunning})
	}
	d := New(Options{
		Sandboxes: func(context.Context) ([]wire.Sandbox, error) { return sbs, nil },
		Stats: func(ctx context.Context, sb wire.Sandbox) (wire.SandboxStats, error) {
			<-ctx.Done() // an engine that never answers
			return wire.SandboxStats{}, ctx.Err()
		},
		ScrapeTimeout: 100 * time.Millisecond,
		Concurrency:   2,
	})
	// Stats never answers before its context ends, so the scrape returns
	// only through the scrape timeout, and every sandbox counts an error.
	out := scrape(t, d)
	if !strings.Contains(out, "hotcell_sandbox_stats_scrape_errors 20") {
		t.Errorf("want 20 scrape errors in\n%s", out)
	}
}
