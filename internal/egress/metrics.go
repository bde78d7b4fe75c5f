package egress

import "github.com/prometheus/client_golang/prometheus"

var (
	descDroppedPackets = prometheus.NewDesc("hotcell_egress_dropped_packets_total",
		"Packets from the sandbox the egress firewall dropped.", []string{"sandbox"}, nil)
	descDroppedBytes = prometheus.NewDesc("hotcell_egress_dropped_bytes_total",
		"Bytes of the packets from the sandbox the egress firewall dropped.", []string{"sandbox"}, nil)
	descDNSRefused = prometheus.NewDesc("hotcell_egress_dns_refused_total",
		"DNS queries of the sandbox refused because the name is not on its allowlist.", []string{"sandbox"}, nil)
	descDNSAnswered = prometheus.NewDesc("hotcell_egress_dns_answered_total",
		"DNS queries of the sandbox forwarded upstream and answered.", []string{"sandbox"}, nil)
	descDenialsLogged = prometheus.NewDesc("hotcell_egress_denials_logged_total",
		"Dropped packets of the sandbox the denial log recorded (NFLOG is rate-limited, so at most the dropped packets).", []string{"sandbox"}, nil)
	descDenialLog = prometheus.NewDesc("hotcell_egress_denial_log_available",
		"1 when dropped packets are itemised with their destination (NFLOG works on this host), else 0.", nil, nil)
)

// Collector exports the per-sandbox egress counters; a sandbox's series go
// when it is forgotten (destroyed).
func (c *Controller) Collector() prometheus.Collector { return collector{c} }

type collector struct{ c *Controller }

func (m collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descDroppedPackets, descDroppedBytes, descDNSRefused, descDNSAnswered, descDenialsLogged, descDenialLog} {
		ch <- d
	}
}

func (m collector) Collect(ch chan<- prometheus.Metric) {
	type snap struct {
		id                        string
		drops                     counters
		refused, answered, logged int64
	}
	m.c.mu.Lock()
	snaps := make([]snap, 0, len(m.c.sbs))
	for _, st := range m.c.sbs {
		snaps = append(snaps, snap{id: st.id, drops: st.dropBase, refused: st.refused, answered: st.answered, logged: st.logged})
	}
	m.c.mu.Unlock()
	avail := 0.0
	if m.c.nfl != nil {
		avail = 1
	}
	ch <- prometheus.MustNewConstMetric(descDenialLog, prometheus.GaugeValue, avail)
	for _, s := range snaps {
		// The live chains' counters are read outside the lock: one
		// iptables call per chain.
		if cur, ok := m.c.fw.sandboxDrops(s.id); ok {
			s.drops.add(cur)
		}
		counter := func(d *prometheus.Desc, v int64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), s.id)
		}
		counter(descDroppedPackets, s.drops.packets)
		counter(descDroppedBytes, s.drops.bytes)
		counter(descDNSRefused, s.refused)
		counter(descDNSAnswered, s.answered)
		counter(descDenialsLogged, s.logged)
	}
}
