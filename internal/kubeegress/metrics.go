package kubeegress

import (
	"io"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// MetricsHandler serves the node's metrics in the Prometheus text format
// at /metrics, and its readiness at /readyz (200 once Ready, else 503)
// (hotcell egress-node --metrics-listen): the egress counters of each
// sandbox whose pod is on this node, under the names and labels the
// daemon uses for its Docker boxes (hotcell_egress_*_total{sandbox}),
// how many pods have their rules in force, and the process's own.
//
// Each node reports its own pods only, so a sum over the DaemonSet's pods
// counts each sandbox once; a pod's counters start from zero with it (a
// stopped and started sandbox is a new pod), which Prometheus's rate()
// takes as a counter reset.
func (n *Node) MetricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		n.ctl.Collector(),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "hotcell_egress_node_pods",
			Help: "Hotcell pods on this node whose egress policy is in force.",
		}, func() float64 {
			n.mu.Lock()
			defer n.mu.Unlock()
			return float64(len(n.known))
		}),
	)
	mux := http.NewServeMux()
	// The DaemonSet's readiness probe: a rollout waits until the node
	// enforces.
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		if !n.Ready() {
			http.Error(w, "not ready: the egress controller is not up (its resolver, its rules, a first pass over the node's pods)", http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		// A chain that cannot be read must not fail the whole scrape.
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 2,
	}))
	return mux
}
