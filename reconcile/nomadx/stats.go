package nomadx

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Stats is a snapshot of the requests a Client made to Nomad.
//
// An error is a request that got no answer (other than through its context
// being cancelled) or an answer with status 400 or above, except 404, which is
// how Nomad says "no such object".
type Stats struct {
	Requests   uint64
	Errors     uint64
	Operations map[string]OperationStats
}

// OperationStats counts the requests of one operation, for example
// "job.plan" or "jobs.parse".
type OperationStats struct {
	Requests uint64
	Errors   uint64
}

// Sub returns the difference s - earlier, to measure one piece of work.
func (s Stats) Sub(earlier Stats) Stats {
	out := Stats{
		Requests:   s.Requests - earlier.Requests,
		Errors:     s.Errors - earlier.Errors,
		Operations: make(map[string]OperationStats, len(s.Operations)),
	}
	for op, v := range s.Operations {
		e := earlier.Operations[op]
		d := OperationStats{Requests: v.Requests - e.Requests, Errors: v.Errors - e.Errors}
		if d.Requests != 0 || d.Errors != 0 {
			out.Operations[op] = d
		}
	}
	return out
}

// String renders the counters on one line, operations sorted by name.
func (s Stats) String() string {
	ops := make([]string, 0, len(s.Operations))
	for op := range s.Operations {
		ops = append(ops, op)
	}
	sort.Strings(ops)
	var b strings.Builder
	fmt.Fprintf(&b, "requests=%d errors=%d", s.Requests, s.Errors)
	for _, op := range ops {
		v := s.Operations[op]
		fmt.Fprintf(&b, " %s=%d", op, v.Requests)
		if v.Errors > 0 {
			fmt.Fprintf(&b, "(%d errors)", v.Errors)
		}
	}
	return b.String()
}

type opCounter struct {
	requests atomic.Uint64
	errors   atomic.Uint64
}

type counters struct {
	requests atomic.Uint64
	errors   atomic.Uint64
	// lastContact (Unix nanoseconds) and lastError: see contact.
	lastContact atomic.Int64
	lastError   atomic.Value

	mu  sync.RWMutex
	ops map[string]*opCounter

	promRequests *prometheus.CounterVec
	promErrors   *prometheus.CounterVec
}

func newCounters(reg prometheus.Registerer) (*counters, error) {
	c := &counters{ops: make(map[string]*opCounter)}
	if reg == nil {
		return c, nil
	}
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "nops",
		Subsystem: "nomad",
		Name:      "requests_total",
		Help:      "Requests made to the Nomad HTTP API, by operation.",
	}, []string{"operation"})
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "nops",
		Subsystem: "nomad",
		Name:      "request_errors_total",
		Help:      "Requests to the Nomad HTTP API that failed or were refused, by operation.",
	}, []string{"operation"})
	var err error
	if c.promRequests, err = registerCounterVec(reg, requests); err != nil {
		return nil, err
	}
	if c.promErrors, err = registerCounterVec(reg, errs); err != nil {
		return nil, err
	}
	return c, nil
}

// registerCounterVec registers v, or reuses the collector already registered
// under the same name (several clients may share one registry).
func registerCounterVec(reg prometheus.Registerer, v *prometheus.CounterVec) (*prometheus.CounterVec, error) {
	if err := reg.Register(v); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
				return existing, nil
			}
		}
		return nil, fmt.Errorf("register Nomad request metrics: %w", err)
	}
	return v, nil
}

func (c *counters) op(name string) *opCounter {
	c.mu.RLock()
	oc, ok := c.ops[name]
	c.mu.RUnlock()
	if ok {
		return oc
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if oc, ok = c.ops[name]; !ok {
		oc = &opCounter{}
		c.ops[name] = oc
	}
	return oc
}

func (c *counters) record(op string, failed bool) {
	oc := c.op(op)
	c.requests.Add(1)
	oc.requests.Add(1)
	if c.promRequests != nil {
		c.promRequests.WithLabelValues(op).Inc()
		// The operation's error series starts at 0 beside its first
		// request, so that an error ratio or an increase of errors sees
		// the first error.
		errs := c.promErrors.WithLabelValues(op)
		if failed {
			errs.Inc()
		}
	}
	if failed {
		c.errors.Add(1)
		oc.errors.Add(1)
	}
}

func (c *counters) snapshot() Stats {
	s := Stats{
		Requests: c.requests.Load(),
		Errors:   c.errors.Load(),
	}
	c.mu.RLock()
	s.Operations = make(map[string]OperationStats, len(c.ops))
	for name, oc := range c.ops {
		s.Operations[name] = OperationStats{Requests: oc.requests.Load(), Errors: oc.errors.Load()}
	}
	c.mu.RUnlock()
	return s
}

type operationKey struct{}

// withOperation names the operation of the requests made with ctx.
func withOperation(ctx context.Context, op string) context.Context {
	if ctx == nil {
		ctx = context.Background()
	}
	return context.WithValue(ctx, operationKey{}, op)
}

// countingTransport counts every request that goes to Nomad.
type countingTransport struct {
	next     http.RoundTripper
	counters *counters
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	op, _ := req.Context().Value(operationKey{}).(string)
	if op == "" {
		op = operationFromPath(req.Method, req.URL.Path)
	}
	resp, err := t.next.RoundTrip(req)
	failed := false
	switch {
	case err != nil:
		failed = !errors.Is(err, context.Canceled) && req.Context().Err() == nil
	case resp.StatusCode >= 400 && resp.StatusCode != http.StatusNotFound:
		failed = true
	}
	t.counters.record(op, failed)
	t.counters.contact(resp, err, req.Context().Err() != nil)
	return resp, err
}

// contact records how the last request that reached an end went: the time
// of the last answer from Nomad, and the error of the last request that
// got none or was refused (403), cleared by the next answer.
func (c *counters) contact(resp *http.Response, err error, cancelled bool) {
	switch {
	case cancelled:
	case err != nil:
		c.lastError.Store(err.Error())
	case resp.StatusCode == http.StatusForbidden || resp.StatusCode == http.StatusUnauthorized:
		c.lastContact.Store(time.Now().UnixNano())
		c.lastError.Store(fmt.Sprintf("Nomad refused the token (HTTP %d)", resp.StatusCode))
	default:
		c.lastContact.Store(time.Now().UnixNano())
		c.lastError.Store("")
	}
}

// Contact is how the client last reached Nomad: when Nomad last answered
// (zero never) and the error of the last request when it got no answer or
// a refusal ("" when the last request was answered).
type Contact struct {
	LastContact time.Time
	Error       string
}

// Contact returns how the client last reached Nomad.
func (c *Client) Contact() Contact {
	var out Contact
	if n := c.counters.lastContact.Load(); n != 0 {
		out.LastContact = time.Unix(0, n).UTC()
	}
	out.Error, _ = c.counters.lastError.Load().(string)
	return out
}

// operationFromPath names requests made outside this package's methods, for
// example "GET /v1/node" for GET /v1/node/<id>/allocations.
func operationFromPath(method, path string) string {
	parts := strings.SplitN(strings.TrimPrefix(path, "/"), "/", 3)
	if len(parts) >= 2 {
		return method + " /" + parts[0] + "/" + parts[1]
	}
	return method + " " + path
}
