package reconcile

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the reconcilers' Prometheus series. They are registered on
// the server's registry, never on a global one.
type metrics struct {
	detectDuration prometheus.Histogram
	detectCycles   *prometheus.CounterVec
	applyDuration  prometheus.Histogram
	created        prometheus.Counter
	// failed counts the deployments this server's reconcilers recorded
	// as failed.
	failed prometheus.Counter
	// streamUp is 1 while Nomad's job event stream is up; liveChanges
	// counts the live changes it reported.
	streamUp    prometheus.Gauge
	liveChanges prometheus.Counter
	// replanned counts the periodic re-plans made; replanPending is the
	// number of due ones the last cycle put off.
	replanned     prometheus.Counter
	replanPending prometheus.Gauge
	// versionChanges counts the changes of Nomad's version seen.
	versionChanges prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, m *core) *metrics {
	mt := &metrics{
		detectDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "nops_detection_duration_seconds", Help: "Duration of detection cycles.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		detectCycles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nops_detection_cycles_total", Help: "Detection cycles by result (ok, error).",
		}, []string{"result"}),
		applyDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "nops_apply_duration_seconds", Help: "Duration of apply passes over the active deployments.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}),
		created: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nops_deployments_created_total", Help: "Deployments created by detection on this server.",
		}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nops_deployments_failed_total",
			Help: "Deployments this server's reconcilers recorded as failed, as leader (a failed apply, health check or hook, or a deployment created failed for a missing or invalid hook).",
		}),
		streamUp: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nops_nomad_event_stream_up", Help: "1 while the leader watches Nomad's job event stream.",
		}),
		liveChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nops_nomad_live_changes_total", Help: "Changes of managed jobs' live jobs seen on Nomad's event stream.",
		}),
		replanned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nops_detection_replans_total",
			Help: "Periodic re-plans of unchanged jobs in sync made by detection, paced by nomad_replan_rate (which counts requests: a job with a scaling block takes two).",
		}),
		versionChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nops_nomad_version_changes_total",
			Help: "Changes of the Nomad servers' version the leader saw; each makes every managed job due for one paced re-plan.",
		}),
		replanPending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "nops_detection_replans_pending",
			Help: "Due periodic re-plans the last detection cycle put off (no room in nomad_replan_rate, or yielding to a cycle asked for); 0 once the re-plan has caught up.",
		}),
	}
	// Both results exported from the start: an increase of errors then
	// sees the first one.
	mt.detectCycles.WithLabelValues("ok")
	mt.detectCycles.WithLabelValues("error")
	if reg == nil {
		return mt
	}
	reg.MustRegister(mt.detectDuration, mt.detectCycles, mt.applyDuration, mt.created, mt.failed, mt.streamUp, mt.liveChanges, mt.replanned, mt.replanPending, mt.versionChanges)
	if !m.cfg.SharedGit {
		reg.MustRegister(newGitCollector(m))
	}
	return mt
}

// newGitCollector returns the collector of the git watcher's metrics.
func newGitCollector(m *core) *gitCollector {
	return &gitCollector{m: m,
		fetchError: prometheus.NewDesc("nops_git_fetch_error", "1 when the last fetch of the repository failed.", []string{"repo"}, nil),
		fetchFailures: prometheus.NewDesc("nops_git_fetch_failures_total",
			"Fetches of the repository that failed since the watcher started on this server (it runs on the leader).", []string{"repo"}, nil),
		lastSuccess: prometheus.NewDesc("nops_git_last_success_timestamp_seconds",
			"When a fetch of the repository last succeeded (Unix time; 0 never).", []string{"repo"}, nil),
	}
}

func (mt *metrics) setStreaming(up bool) {
	v := 0.0
	if up {
		v = 1
	}
	mt.streamUp.Set(v)
}

func (mt *metrics) observeDetection(start time.Time, err error) {
	mt.detectDuration.Observe(time.Since(start).Seconds())
	result := "ok"
	if err != nil {
		result = "error"
	}
	mt.detectCycles.WithLabelValues(result).Inc()
}

// gitCollector reports the git watcher's fetch results at each scrape.
type gitCollector struct {
	m             *core
	fetchError    *prometheus.Desc
	fetchFailures *prometheus.Desc
	lastSuccess   *prometheus.Desc
}

func (c *gitCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.fetchError
	ch <- c.fetchFailures
	ch <- c.lastSuccess
}

func (c *gitCollector) Collect(ch chan<- prometheus.Metric) {
	if c.m.git == nil {
		return
	}
	for _, st := range c.m.git.Status() {
		failed := 0.0
		if st.LastError != "" {
			failed = 1
		}
		ch <- prometheus.MustNewConstMetric(c.fetchError, prometheus.GaugeValue, failed, st.Name)
		ch <- prometheus.MustNewConstMetric(c.fetchFailures, prometheus.CounterValue, float64(st.Failures), st.Name)
		last := 0.0
		if !st.LastSuccess.IsZero() {
			last = float64(st.LastSuccess.Unix())
		}
		ch <- prometheus.MustNewConstMetric(c.lastSuccess, prometheus.GaugeValue, last, st.Name)
	}
}
