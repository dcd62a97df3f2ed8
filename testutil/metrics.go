package testutil

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// MetricValue returns the value of the counter or gauge name in g, of the
// series whose labels include labels (name, value pairs); without labels,
// the family's first series. It is an error when g has no such series.
func MetricValue(g prometheus.Gatherer, name string, labels ...string) (float64, error) {
	if len(labels)%2 != 0 {
		return 0, fmt.Errorf("metric %s: labels %q are not name, value pairs", name, labels)
	}
	families, err := g.Gather()
	if err != nil {
		return 0, fmt.Errorf("gather metrics: %w", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for i := 0; i < len(labels); i += 2 {
				if v, ok := have[labels[i]]; !ok || v != labels[i+1] {
					continue series
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue(), nil
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue(), nil
			default:
				return 0, fmt.Errorf("metric %s is neither a counter nor a gauge", name)
			}
		}
	}
	return 0, fmt.Errorf("no metric %s%v", name, labels)
}
