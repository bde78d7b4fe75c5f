package metrics

import (
	"context"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/hotcell/hotcell/internal/wire"
)

// Options configure the daemon's metrics.
type Options struct {
	// Sandboxes lists every sandbox, for the by-state gauge and to find
	// the running ones to sample.
	Sandboxes func(ctx context.Context) ([]wire.Sandbox, error)
	// Stats samples one running sandbox (a Sampler's Sample). Nil leaves
	// the per-sandbox gauges out.
	Stats func(ctx context.Context, sb wire.Sandbox) (wire.SandboxStats, error)
	// ScrapeTimeout bounds the whole per-sandbox collection; default 5s.
	ScrapeTimeout time.Duration
	// Concurrency bounds the stats calls in flight during a scrape; default 8.
	Concurrency int
	Log         *slog.Logger
}

// Daemon holds the registry served at /metrics and the instruments the
// API feeds. Labels are kept to bounded sets: route patterns (never raw
// paths), methods, status codes, states; the sandbox id appears only on
// the per-sandbox gauges, one series set per running sandbox.
type Daemon struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
	creates  *prometheus.CounterVec
	destroys *prometheus.CounterVec
	execs    *prometheus.CounterVec
	execTime prometheus.Histogram
	steps    map[string]*prometheus.HistogramVec // by op: create, destroy
}

// Route patterns the request observer turns into lifecycle and exec
// metrics (the API's own patterns; see internal/api/server.go).
const (
	routeCreate  = "POST /v1/sandboxes"
	routeDestroy = "DELETE /v1/sandboxes/{id}"
	routeExec    = "POST /v1/sandboxes/{id}/exec"
)

// New builds the registry: Go runtime and process collectors, the
// request, lifecycle and exec instruments, and the sandbox collector.
func New(opts Options) *Daemon {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.ScrapeTimeout <= 0 {
		opts.ScrapeTimeout = 5 * time.Second
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 8
	}
	d := &Daemon{
		reg: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hotcell_http_requests_total",
			Help: "API requests by route pattern, method and status code.",
		}, []string{"route", "method", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hotcell_http_request_duration_seconds",
			Help:    "API request duration by route pattern and method (streams: until they end).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}, []string{"route", "method"}),
		creates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hotcell_sandbox_creates_total",
			Help: "Sandbox creates through the API, by result (ok, error).",
		}, []string{"result"}),
		destroys: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hotcell_sandbox_destroys_total",
			Help: "Sandbox destroys through the API, by result (ok, error).",
		}, []string{"result"}),
		execs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hotcell_execs_total",
			Help: "Execs (buffered and streamed) by result: ok when the command ran (whatever its exit code), error otherwise.",
		}, []string{"result"}),
		execTime: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hotcell_exec_duration_seconds",
			Help:    "Exec duration as the API saw it, from request to the last byte.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
	}
	d.steps = map[string]*prometheus.HistogramVec{}
	for _, op := range []string{"create", "destroy", "claim"} {
		d.steps[op] = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "hotcell_" + op + "_step_seconds",
			Help:    "Duration of each step of a sandbox " + op + " (the steps of one add up to the whole).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}, []string{"step"})
		d.reg.MustRegister(d.steps[op])
	}
	for _, r := range []string{"ok", "error"} {
		// Present from the start, so rate() has a zero to start from.
		d.creates.WithLabelValues(r)
		d.destroys.WithLabelValues(r)
		d.execs.WithLabelValues(r)
	}
	d.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		d.requests, d.latency, d.creates, d.destroys, d.execs, d.execTime,
		&sandboxCollector{opts: opts, log: opts.Log.With("component", "metrics")},
	)
	return d
}

// Handler serves the registry in the Prometheus text format.
func (d *Daemon) Handler() http.Handler {
	return promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{
		// A failing sandbox must not fail the scrape of everything else.
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
	})
}

// ObserveStep records how long one step of a create, destroy or claim took (a
// sandbox.StepObserver). Steps of other operations are ignored.
func (d *Daemon) ObserveStep(op, step string, took time.Duration) {
	if h, ok := d.steps[op]; ok {
		h.WithLabelValues(step).Observe(took.Seconds())
	}
}

// Registry is for tests and for registering more collectors.
func (d *Daemon) Registry() *prometheus.Registry { return d.reg }

// ObserveRequest records one finished API request. r.Pattern is the mux
// pattern that matched ("" when none did, e.g. unauthenticated requests).
func (d *Daemon) ObserveRequest(r *http.Request, status int, elapsed time.Duration) {
	if status == 0 {
		status = http.StatusOK // nothing written: net/http answers 200
	}
	route := r.Pattern
	if _, path, ok := strings.Cut(route, " "); ok {
		route = path
	}
	if route == "" {
		route = "none"
	}
	d.requests.WithLabelValues(route, r.Method, strconv.Itoa(status)).Inc()
	d.latency.WithLabelValues(route, r.Method).Observe(elapsed.Seconds())
	result := "ok"
	if status >= 300 {
		result = "error"
	}
	switch r.Pattern {
	case routeCreate:
		d.creates.WithLabelValues(result).Inc()
	case routeDestroy:
		d.destroys.WithLabelValues(result).Inc()
	case routeExec:
		d.execs.WithLabelValues(result).Inc()
		d.execTime.Observe(elapsed.Seconds())
	}
}

var (
	descState = prometheus.NewDesc("hotcell_sandboxes",
		"Sandboxes by lifecycle state.", []string{"state"}, nil)
	descCPUPercent = prometheus.NewDesc("hotcell_sandbox_cpu_percent",
		"CPU use since the previous sample of the sandbox; 100 is one core.", []string{"sandbox"}, nil)
	descCPUSeconds = prometheus.NewDesc("hotcell_sandbox_cpu_seconds_total",
		"CPU time the sandbox used since it started.", []string{"sandbox"}, nil)
	descMemory = prometheus.NewDesc("hotcell_sandbox_memory_bytes",
		"Memory use without the page cache.", []string{"sandbox"}, nil)
	descMemoryLimit = prometheus.NewDesc("hotcell_sandbox_memory_limit_bytes",
		"Memory limit (the host's memory when unlimited).", []string{"sandbox"}, nil)
	descPids = prometheus.NewDesc("hotcell_sandbox_pids",
		"Tasks (processes and threads) in the sandbox.", []string{"sandbox"}, nil)
	descRx = prometheus.NewDesc("hotcell_sandbox_network_receive_bytes_total",
		"Bytes received on all of the sandbox's interfaces.", []string{"sandbox"}, nil)
	descTx = prometheus.NewDesc("hotcell_sandbox_network_transmit_bytes_total",
		"Bytes sent on all of the sandbox's interfaces.", []string{"sandbox"}, nil)
	descScrapeErrors = prometheus.NewDesc("hotcell_sandbox_stats_scrape_errors",
		"Running sandboxes whose stats could not be read in this scrape.", nil, nil)
)

// sandboxCollector collects on scrape: it lists the sandboxes and samples
// the running ones, a few at a time, all within the scrape timeout.
type sandboxCollector struct {
	opts Options
	log  *slog.Logger
}

func (c *sandboxCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descState, descCPUPercent, descCPUSeconds, descMemory, descMemoryLimit, descPids, descRx, descTx, descScrapeErrors} {
		ch <- d
	}
}

func (c *sandboxCollector) Collect(ch chan<- prometheus.Metric) {
	if c.opts.Sandboxes == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.ScrapeTimeout)
	defer cancel()
	sbs, err := c.opts.Sandboxes(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(descState, err)
		return
	}
	counts := map[wire.State]int{}
	for _, st := range []wire.State{wire.StateCreating, wire.StateRunning, wire.StatePaused, wire.StateStopped, wire.StateError} {
		counts[st] = 0 // every state present, so a sum or an alert never sees a gap
	}
	var running []wire.Sandbox
	for _, sb := range sbs {
		counts[sb.State]++
		if sb.State == wire.StateRunning {
			running = append(running, sb)
		}
	}
	for st, n := range counts {
		ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, float64(n), string(st))
	}
	if c.opts.Stats == nil {
		return
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed int
	)
	sem := make(chan struct{}, c.opts.Concurrency)
	for _, sb := range running {
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				mu.Lock()
				failed++
				mu.Unlock()
				return
			}
			defer func() { <-sem }()
			st, err := c.opts.Stats(ctx, sb)
			if err != nil {
				// Stopped between the list and the sample, or the engine
				// is slow: skip it this time.
				c.log.Debug("sandbox stats for metrics", "sandbox", sb.ID, "err", err)
				mu.Lock()
				failed++
				mu.Unlock()
				return
			}
			id := sb.ID
			ch <- prometheus.MustNewConstMetric(descCPUPercent, prometheus.GaugeValue, st.CPU.Percent, id)
			ch <- prometheus.MustNewConstMetric(descCPUSeconds, prometheus.CounterValue, float64(st.CPU.UsageNs)/1e9, id)
			ch <- prometheus.MustNewConstMetric(descMemory, prometheus.GaugeValue, float64(st.Memory.UsageBytes), id)
			ch <- prometheus.MustNewConstMetric(descMemoryLimit, prometheus.GaugeValue, float64(st.Memory.LimitBytes), id)
			if !slices.Contains(st.Unavailable, wire.StatPidsCurrent) {
				ch <- prometheus.MustNewConstMetric(descPids, prometheus.GaugeValue, float64(st.Pids.Current), id)
			}
			ch <- prometheus.MustNewConstMetric(descRx, prometheus.CounterValue, float64(st.Network.RxBytes), id)
			ch <- prometheus.MustNewConstMetric(descTx, prometheus.CounterValue, float64(st.Network.TxBytes), id)
		})
	}
	wg.Wait()
	ch <- prometheus.MustNewConstMetric(descScrapeErrors, prometheus.GaugeValue, float64(failed))
}
