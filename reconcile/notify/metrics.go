package notify

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nops-dev/nops/structs"
)

// metrics are the delivery loop's Prometheus series, registered on the
// server's registry.
type metrics struct {
	sent, failed, retried, dead *prometheus.CounterVec
	depth, oldest               prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	counter := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"target"})
	}
	m := &metrics{
		sent:    counter("nops_notifications_sent_total", "Notifications delivered, by target."),
		failed:  counter("nops_notifications_failed_total", "Delivery attempts that failed, by target."),
		retried: counter("nops_notifications_retried_total", "Delivery attempts that retried an earlier failed one, by target."),
		dead:    counter("nops_notifications_dead_total", "Deliveries given up after the give-up age, by target."),
		depth: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nops_notifications_queue_depth",
			Help: "Notifications pending delivery, as the leader last saw them."}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nops_notifications_oldest_pending_age_seconds",
			Help: "Age of the oldest notification pending delivery (0 when none)."}),
	}
	if reg != nil {
		reg.MustRegister(m.sent, m.failed, m.retried, m.dead, m.depth, m.oldest)
	}
	return m
}

// startTargets exports each target's counters at 0 before its first
// delivery, so that a rate or increase sees the first one (a series that
// appears at 1 shows no increase) and an alert on dead letters can name
// its series from the start.
func (m *metrics) startTargets(names []string) {
	for _, name := range names {
		for _, v := range []*prometheus.CounterVec{m.sent, m.failed, m.retried, m.dead} {
			v.WithLabelValues(name)
		}
	}
}

func (m *metrics) observeQueue(pending []*structs.Notification, now time.Time) {
	m.depth.Set(float64(len(pending)))
	if len(pending) == 0 {
		m.oldest.Set(0)
		return
	}
	m.oldest.Set(max(now.Sub(pending[0].Time).Seconds(), 0))
}
