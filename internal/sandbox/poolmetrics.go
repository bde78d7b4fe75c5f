package sandbox

import "github.com/prometheus/client_golang/prometheus"

var (
	descPoolReady = prometheus.NewDesc("hotcell_pool_ready",
		"Boxes of the template's warm pool ready to be claimed.", []string{"template"}, nil)
	descPoolCreating = prometheus.NewDesc("hotcell_pool_creating",
		"Boxes of the template's warm pool being made (or re-adopted after a restart).", []string{"template"}, nil)
	descPoolMin = prometheus.NewDesc("hotcell_pool_min",
		"The configured min of the template's warm pool.", []string{"template"}, nil)
	descPoolClaims = prometheus.NewDesc("hotcell_pool_claims_total",
		"Creates from the template that claimed a pooled box.", []string{"template"}, nil)
	descPoolMisses = prometheus.NewDesc("hotcell_pool_misses_total",
		"Creates from the template that found no matching pooled box and made one.", []string{"template"}, nil)
	descPoolRefill = prometheus.NewDesc("hotcell_pool_refill_seconds",
		"Time to make one pooled box, from the refill's start until its agent answers.", []string{"template"}, nil)
)

// PoolCollector exports the warm pools' sizes, claims, misses and refill
// latency; nil when pools are off.
func (m *Manager) PoolCollector() prometheus.Collector {
	if m.pools == nil {
		return nil
	}
	return poolCollector{m.pools}
}

type poolCollector struct{ ps *poolSet }

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descPoolReady, descPoolCreating, descPoolMin, descPoolClaims, descPoolMisses, descPoolRefill} {
		ch <- d
	}
}

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	type snap struct {
		st      poolSnapshot
		buckets map[float64]uint64
		count   uint64
		sum     float64
	}
	c.ps.mu.Lock()
	snaps := make([]snap, 0, len(c.ps.byName))
	for _, p := range c.ps.byName {
		if p.removed {
			continue
		}
		s := snap{st: poolSnapshot{name: p.name, ready: len(p.ready), creating: p.creating + len(p.adopting), min: p.cfg.Min, claims: p.claims, misses: p.misses},
			buckets: map[float64]uint64{}, count: p.refill.count, sum: p.refill.sum}
		for i, b := range refillBuckets {
			if p.refill.counts != nil {
				s.buckets[b] = p.refill.counts[i]
			} else {
				s.buckets[b] = 0
			}
		}
		snaps = append(snaps, s)
	}
	c.ps.mu.Unlock()
	for _, s := range snaps {
		g := func(d *prometheus.Desc, t prometheus.ValueType, v float64) {
			ch <- prometheus.MustNewConstMetric(d, t, v, s.st.name)
		}
		g(descPoolReady, prometheus.GaugeValue, float64(s.st.ready))
		g(descPoolCreating, prometheus.GaugeValue, float64(s.st.creating))
		g(descPoolMin, prometheus.GaugeValue, float64(s.st.min))
		g(descPoolClaims, prometheus.CounterValue, float64(s.st.claims))
		g(descPoolMisses, prometheus.CounterValue, float64(s.st.misses))
		ch <- prometheus.MustNewConstHistogram(descPoolRefill, s.count, s.sum, s.buckets, s.st.name)
	}
}

type poolSnapshot struct {
	name            string
	ready, creating int
	min             int
	claims, misses  int64
}
