package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nops-dev/nops/structs"
)

// Retention runs like Nomad's garbage collection: a leader loop proposes a
// GC entry every retention interval, with cut-off times from its clock and
// the retention block, and the FSM decides what goes, the same way on every
// server (fsm/retention.go). An operator forces a pass with
// POST /v1/operator/gc (nops operator gc).

const (
	// gcMaxDeployments, gcMaxScan and gcMaxEvents bound one GC entry (the
	// deployments it changes, reads, and the events it deletes), so that
	// a pass over a large state or backlog is many short entries rather
	// than one that holds the log (BenchmarkRetentionYear1000Jobs); the
	// pass repeats them until nothing is left.
	gcMaxDeployments = 500
	gcMaxScan        = 5_000
	gcMaxEvents      = 5_000
	// gcMaxEntries bounds the entries of one pass.
	gcMaxEntries = 10_000
	// gcFirstDelay is how long a new leader waits before its first pass,
	// so that a failover does not start with a large write.
	gcFirstDelay = time.Minute
)

// retention holds the metrics of the passes this server ran as leader and
// makes passes run one at a time.
type retention struct {
	s       *Server
	mu      sync.Mutex
	passes  prometheus.Counter
	removed *prometheus.CounterVec
}

func newRetention(s *Server, reg *prometheus.Registry) *retention {
	r := &retention{
		s: s,
		passes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "nops_gc_passes_total", Help: "Retention passes this server ran as leader.",
		}),
		removed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nops_gc_removed_total",
			Help: "What retention passes this server ran removed: job specs of finished deployments, deployments, events.",
		}, []string{"kind"}),
	}
	for _, k := range []string{"spec", "deployment", "event"} {
		r.removed.WithLabelValues(k)
	}
	reg.MustRegister(r.passes, r.removed)
	return r
}

// loop is a leader loop: it runs a pass every interval of the
// live configuration, the first a little after leadership is won, and
// stops with the leadership.
func (r *retention) loop(ctx context.Context) {
	s := r.s
	logger := s.logger.Named("gc")
	wait := min(gcFirstDelay, s.liveConfig().Retention.Interval)
	for {
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		if _, err := r.pass(ctx, "nops"); err != nil && ctx.Err() == nil {
			logger.Warn("retention pass failed", "error", err)
		}
		wait = s.liveConfig().Retention.Interval
	}
}

// GC runs one retention pass now, on the leader, and returns what it
// removed.
func (s *Server) GC(ctx context.Context, actor string) (structs.GCResult, error) {
	return s.retention.pass(ctx, actor)
}

// pass runs one retention pass: GC entries until nothing is left.
func (r *retention) pass(ctx context.Context, actor string) (structs.GCResult, error) {
	s := r.s
	r.mu.Lock()
	defer r.mu.Unlock()
	conf := s.liveConfig().Retention
	var total structs.GCResult
	for i := 0; i < gcMaxEntries; i++ {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		now := time.Now().UTC()
		res, err := r.apply(&structs.GCRequest{
			WriteMeta:         structs.WriteMeta{Time: now, Actor: actor},
			SpecBefore:        now.Add(-conf.SpecAfter),
			DeploymentsBefore: now.Add(-conf.DeploymentAge),
			KeepPerJob:        conf.DeploymentsPerJob,
			EventsBefore:      now.Add(-conf.EventAge),
			// A replayed webhook delivery is refused for this long.
			WebhookDeliveriesBefore: now.Add(-structs.WebhookDeliveryRetention),
			FromJob:                 total.NextJob,
			MaxDeployments:          gcMaxDeployments,
			MaxScan:                 gcMaxScan,
			MaxEvents:               gcMaxEvents,
		})
		if err != nil {
			return total, err
		}
		total = total.Add(*res)
		r.removed.WithLabelValues("spec").Add(float64(res.SpecsDropped))
		r.removed.WithLabelValues("deployment").Add(float64(res.DeploymentsDeleted))
		r.removed.WithLabelValues("event").Add(float64(res.EventsDeleted))
		if !res.More {
			break
		}
	}
	r.passes.Inc()
	if total.SpecsDropped+total.DeploymentsDeleted+total.EventsDeleted > 0 {
		s.logger.Named("gc").Info("retention pass", "specs_dropped", total.SpecsDropped,
			"deployments_deleted", total.DeploymentsDeleted, "events_deleted", total.EventsDeleted, "actor", actor)
	}
	return total, nil
}

// errGCAnswer is an FSM answer to a GC entry that is neither a result nor
// an error.
var errGCAnswer = errors.New("unexpected answer to a retention pass")

// apply applies one GC entry and returns its result (Apply keeps only
// an answer that is an error).
func (r *retention) apply(req *structs.GCRequest) (*structs.GCResult, error) {
	_, resp, err := r.s.raftApply(structs.GCRequestType, req)
	if err != nil {
		return nil, err
	}
	switch resp := resp.(type) {
	case error:
		return nil, resp
	case *structs.GCResult:
		return resp, nil
	}
	return nil, fmt.Errorf("%w: %T", errGCAnswer, resp)
}
