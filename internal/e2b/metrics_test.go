package e2b

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/wire"
)

type fakeStats struct{ st wire.SandboxStats }

func (f fakeStats) Stats(ctx context.Context, id string, _ time.Duration) (wire.SandboxStats, error) {
	st := f.st
	st.ID = id
	return st, nil
}

func TestMetrics(t *testing.T) {
	f := newFake()
	at := time.Now().UTC().Truncate(time.Second)
	s := New(Options{Sandboxes: f, Secret: []byte("s"), Token: "key", DefaultImage: "hotcell/base:latest",
		Stats: fakeStats{wire.SandboxStats{Time: at,
			CPU:    wire.CPUStats{Percent: 150, LimitCpus: 2},
			Memory: wire.MemoryStats{UsageBytes: 64 << 20, LimitBytes: 512 << 20},
			Disk:   &wire.DiskUsage{Bytes: 5 << 20}}}})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)

	var sb sandboxJSON
	if st, _, body := call(t, hs, "POST", "/v2/sandboxes", `{"templateID":"base"}`, &sb); st != 201 {
		t.Fatalf("create: %d %s", st, body)
	}
	var ms []sandboxMetric
	if st, _, body := call(t, hs, "GET", "/sandboxes/"+sb.SandboxID+"/metrics", "", &ms); st != 200 || len(ms) != 1 {
		t.Fatalf("metrics: %d %s", st, body)
	}
	m := ms[0]
	// hotcell's percent is of one core; E2B's of the sandbox's cores.
	if m.CPUCount != 2 || m.CPUUsedPct != 75 || m.MemUsed != 64<<20 || m.MemTotal != 512<<20 ||
		m.DiskUsed != 5<<20 || !m.Timestamp.Equal(at) || m.TimestampUnix != at.Unix() {
		t.Fatalf("metric %+v", m)
	}

	past := time.Now().Add(-time.Hour).Unix()
	for path, want := range map[string]int{
		"/sandboxes/" + sb.SandboxID + "/metrics?end=" + itoa(past):          0,
		"/sandboxes/" + sb.SandboxID + "/metrics?start=" + itoa(past):        1,
		"/sandboxes/" + sb.SandboxID + "/metrics?start=" + itoa(past+7200*2): 0,
	} {
		ms = nil
		if st, _, body := call(t, hs, "GET", path, "", &ms); st != 200 || len(ms) != want {
			t.Errorf("%s: %d %s, want %d samples", path, st, body, want)
		}
	}
	var e apiError
	if st, _, _ := call(t, hs, "GET", "/sandboxes/"+sb.SandboxID+"/metrics?start=yesterday", "", &e); st != 400 || e.Code != 400 {
		t.Errorf("bad start: %d %+v", st, e)
	}
	if st, _, _ := call(t, hs, "GET", "/sandboxes/sb-000000000000/metrics", "", &e); st != 404 || e.Code != 404 {
		t.Errorf("missing sandbox: %d %+v", st, e)
	}
	if st, _, _ := call(t, hs, "POST", "/sandboxes/"+sb.SandboxID+"/pause", "", nil); st != http.StatusNoContent {
		t.Fatalf("pause: %d", st)
	}
	ms = nil
	if st, _, body := call(t, hs, "GET", "/sandboxes/"+sb.SandboxID+"/metrics", "", &ms); st != 200 || len(ms) != 0 || body != "[]" {
		t.Errorf("paused: %d %s, want []", st, body)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestMetricsNotReadYet: a sample whose memory or CPU the backend could
// not read yet (a pod the kubelet has not looked at) is no sample, not
// one of zeros.
func TestMetricsNotReadYet(t *testing.T) {
	for _, missing := range []string{"memory.usage", "cpu.usage"} {
		f := newFake()
		s := New(Options{Sandboxes: f, Secret: []byte("s"), Token: "key", DefaultImage: "hotcell/base:latest",
			Stats: fakeStats{wire.SandboxStats{Time: time.Now(), Unavailable: []string{"network", missing}}}})
		hs := httptest.NewServer(s.Handler())
		var sb sandboxJSON
		if st, _, body := call(t, hs, "POST", "/v2/sandboxes", `{"templateID":"base"}`, &sb); st != 201 {
			t.Fatalf("create: %d %s", st, body)
		}
		var ms []sandboxMetric
		if st, _, body := call(t, hs, "GET", "/sandboxes/"+sb.SandboxID+"/metrics", "", &ms); st != 200 || body != "[]" {
			t.Errorf("%s unavailable: %d %s, want []", missing, st, body)
		}
		hs.Close()
	}
}
