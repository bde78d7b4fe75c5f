package gateway

import "github.com/prometheus/client_golang/prometheus"

var (
	descRequests = prometheus.NewDesc("hotcell_gateway_requests_total",
		"LLM gateway requests forwarded upstream, by sandbox and provider.", []string{"sandbox", "provider"}, nil)
	descRejected = prometheus.NewDesc("hotcell_gateway_rejected_total",
		"LLM gateway requests refused by a budget or the rate limit.", []string{"sandbox", "provider"}, nil)
	descErrors = prometheus.NewDesc("hotcell_gateway_upstream_errors_total",
		"LLM gateway requests the upstream did not answer (unreachable, timed out, cut off).", []string{"sandbox", "provider"}, nil)
	descBytes = prometheus.NewDesc("hotcell_gateway_bytes_total",
		"LLM gateway body bytes: in is sent upstream, out came back.", []string{"sandbox", "provider", "direction"}, nil)
	descTokens = prometheus.NewDesc("hotcell_gateway_tokens_total",
		"Token usage the upstreams reported, by kind (input, output).", []string{"sandbox", "provider", "kind"}, nil)
)

// Collector exports the usage counters; one series set per sandbox and
// provider, gone with the sandbox.
func (g *Gateway) Collector() prometheus.Collector { return collector{g} }

type collector struct{ g *Gateway }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRequests, descRejected, descErrors, descBytes, descTokens} {
		ch <- d
	}
}

func (c collector) Collect(ch chan<- prometheus.Metric) {
	c.g.mu.RLock()
	snaps := make(map[key]*counters, len(c.g.usage))
	for k, v := range c.g.usage {
		snaps[k] = v
	}
	c.g.mu.RUnlock()
	for k, ctr := range snaps {
		s := ctr.snapshot()
		counter := func(d *prometheus.Desc, v int64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{k.sandbox, k.provider}, extra...)...)
		}
		counter(descRequests, s.Requests)
		counter(descRejected, s.Rejected)
		counter(descErrors, s.Errors)
		counter(descBytes, s.BytesIn, "in")
		counter(descBytes, s.BytesOut, "out")
		counter(descTokens, s.InputTokens, "input")
		counter(descTokens, s.OutputTokens, "output")
	}
}
