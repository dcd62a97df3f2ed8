package testutil

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestMetricValue reads counters and gauges by name and labels, and names
// what it cannot find.
func TestMetricValue(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "things_total", Help: "Things."})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "pending", Help: "Pending."})
	v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ops_total", Help: "Ops."}, []string{"op"})
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "seconds", Help: "Seconds."})
	reg.MustRegister(c, g, v, h)
	c.Add(3)
	g.Set(7)
	v.WithLabelValues("read").Add(2)
	v.WithLabelValues("write").Add(5)
	for _, tc := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"things_total", nil, 3},
		{"pending", nil, 7},
		{"ops_total", []string{"op", "write"}, 5},
		{"ops_total", []string{"op", "read"}, 2},
	} {
		got, err := MetricValue(reg, tc.name, tc.labels...)
		if err != nil || got != tc.want {
			t.Errorf("MetricValue(%s, %v) = %v, %v; want %v", tc.name, tc.labels, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name   string
		labels []string
	}{
		{"missing_total", nil},
		{"ops_total", []string{"op", "delete"}},
		{"ops_total", []string{"op"}},
		{"seconds", nil},
	} {
		if got, err := MetricValue(reg, tc.name, tc.labels...); err == nil {
			t.Errorf("MetricValue(%s, %v) = %v with no error", tc.name, tc.labels, got)
		}
	}
}
