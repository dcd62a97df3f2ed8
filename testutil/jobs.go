package testutil

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"
)

// Job specifications for Nomad's mock_driver, the task driver built into
// non-release Nomad binaries: a task "runs" with no container runtime, and its
// duration, exit code and start failure are set in its config. Resources are
// tiny (10 MHz, 16 MB, 10 MB of disk) so that many jobs fit on one dev node.
//
// Every group and task is named "app". A service job reaches a successful
// Nomad deployment about 1s (min_healthy_time) after its allocation starts.

// JobOption changes a job built by ServiceJobHCL, BatchJobHCL or HookJobHCL.
type JobOption func(*jobSpec)

type jobSpec struct {
	id        string
	namespace string
	jobType   string
	meta      map[string]string
	env       map[string]string

	count      int
	scalingMin int
	scalingMax int

	// update block (service jobs)
	minHealthyTime   time.Duration
	healthyDeadline  time.Duration
	progressDeadline time.Duration
	canaries         int
	autoPromote      bool
	autoRevert       bool

	// mock_driver config
	runFor     time.Duration
	exitCode   int
	startError string

	parameterized bool
	metaRequired  []string
	metaOptional  []string
}

// Defaults of the update block of service jobs: a healthy allocation counts
// after 1s; an allocation that is not healthy after 30s is unhealthy; a
// deployment with no progress for 1m fails.
const (
	defaultMinHealthyTime   = time.Second
	defaultHealthyDeadline  = 30 * time.Second
	defaultProgressDeadline = time.Minute
)

// hookMetaKeys returns the dispatch meta keys Nops passes to a hook run,
// declared as meta_optional by HookJobHCL.
func hookMetaKeys() []string {
	return []string{"nops_deployment", "nops_job", "nops_commit", "nops_phase"}
}

// ServiceJobHCL returns a service job whose task runs for an hour, with an
// update block tuned for a fast Nomad deployment. With no options it has no
// meta; add WithManaged for a job Nops manages.
func ServiceJobHCL(id string, opts ...JobOption) string {
	spec := &jobSpec{
		id:               id,
		jobType:          "service",
		count:            1,
		minHealthyTime:   defaultMinHealthyTime,
		healthyDeadline:  defaultHealthyDeadline,
		progressDeadline: defaultProgressDeadline,
		runFor:           time.Hour,
	}
	return spec.render(opts)
}

// BatchJobHCL returns a batch job whose task runs for 100ms and exits 0.
func BatchJobHCL(id string, opts ...JobOption) string {
	spec := &jobSpec{
		id:      id,
		jobType: "batch",
		count:   1,
		runFor:  100 * time.Millisecond,
	}
	return spec.render(opts)
}

// HookJobHCL returns a Nops hook: a parameterized batch job with meta
// nops_role = "hook", that accepts the nops_* dispatch meta keys as
// meta_optional, and whose task runs for 100ms and exits 0. Use WithExitCode
// for a failing hook, WithRunFor for a slow one, WithHookMeta to declare
// other keys. Its task is neither restarted nor rescheduled, so a failed run
// is final.
func HookJobHCL(id string, opts ...JobOption) string {
	hook := func(s *jobSpec) {
		s.parameterized, s.metaOptional = true, hookMetaKeys()
		s.meta = map[string]string{"nops_role": "hook"}
	}
	return BatchJobHCL(id, append([]JobOption{hook}, opts...)...)
}

// WithNamespace sets the job's namespace (default: the agent's default).
func WithNamespace(ns string) JobOption {
	return func(s *jobSpec) { s.namespace = ns }
}

// WithManaged makes the job one Nops manages (meta nops_managed = "true")
// with the given policy (meta nops_policy).
func WithManaged(policy string) JobOption {
	return func(s *jobSpec) {
		WithMeta("nops_managed", "true")(s)
		WithMeta("nops_policy", policy)(s)
	}
}

// WithMeta sets one key of the job's meta.
func WithMeta(key, value string) JobOption {
	return func(s *jobSpec) {
		if s.meta == nil {
			s.meta = make(map[string]string)
		}
		s.meta[key] = value
	}
}

// WithEnv sets one environment variable of the task.
func WithEnv(key, value string) JobOption {
	return func(s *jobSpec) {
		if s.env == nil {
			s.env = make(map[string]string)
		}
		s.env[key] = value
	}
}

// WithCount sets the group's count (default 1).
func WithCount(n int) JobOption {
	return func(s *jobSpec) { s.count = n }
}

// WithScaling adds a scaling block to the group, as an autoscaler would use.
func WithScaling(minCount, maxCount int) JobOption {
	return func(s *jobSpec) {
		s.scalingMin = minCount
		s.scalingMax = maxCount
	}
}

// WithCanaries sets the number of canaries of a service job. Without
// autoPromote its Nomad deployment waits for a promotion.
func WithCanaries(n int, autoPromote bool) JobOption {
	return func(s *jobSpec) {
		s.canaries = n
		s.autoPromote = autoPromote
	}
}

// WithAutoRevert sets auto_revert in the update block of a service job.
func WithAutoRevert() JobOption {
	return func(s *jobSpec) { s.autoRevert = true }
}

// WithUpdate sets min_healthy_time, healthy_deadline and progress_deadline in
// the update block of a service job. A progress deadline of 0 makes the
// first unhealthy allocation fail the deployment.
func WithUpdate(minHealthyTime, healthyDeadline, progressDeadline time.Duration) JobOption {
	return func(s *jobSpec) {
		s.minHealthyTime = minHealthyTime
		s.healthyDeadline = healthyDeadline
		s.progressDeadline = progressDeadline
	}
}

// WithFailure makes the task fail to start, with no restart and no
// reschedule, and a progress deadline of 0: the Nomad deployment of a service
// job becomes "failed" as soon as its first allocation fails (a few seconds),
// and a batch job's allocation fails.
func WithFailure() JobOption {
	return func(s *jobSpec) {
		s.startError = "failure injected by the test"
		s.progressDeadline = 0
	}
}

// WithRunFor sets how long the mock task runs before it exits.
func WithRunFor(d time.Duration) JobOption {
	return func(s *jobSpec) { s.runFor = d }
}

// WithExitCode sets the exit code of the mock task when its run ends. A
// non-zero code fails the allocation (it is neither restarted nor
// rescheduled).
func WithExitCode(code int) JobOption {
	return func(s *jobSpec) { s.exitCode = code }
}

// WithHookMeta sets the meta_required and meta_optional lists of a
// parameterized job, replacing the defaults of HookJobHCL.
func WithHookMeta(required, optional []string) JobOption {
	return func(s *jobSpec) {
		s.parameterized = true
		s.metaRequired = slices.Clone(required)
		s.metaOptional = slices.Clone(optional)
	}
}

func (s *jobSpec) render(opts []JobOption) string {
	for _, opt := range opts {
		opt(s)
	}
	// A task that fails is final: no restart, no reschedule, so that tests
	// see the failure at once.
	final := s.startError != "" || s.exitCode != 0 || s.jobType == "batch"

	var b strings.Builder
	w := func(indent int, format string, args ...any) {
		b.WriteString(strings.Repeat("  ", indent))
		fmt.Fprintf(&b, format, args...)
		b.WriteByte('\n')
	}

	w(0, "job %s {", hclString(s.id))
	s.writeJobBlocks(w)
	w(1, "")
	s.writeGroup(w, final)
	w(0, "}")
	return b.String()
}

// writeJobBlocks writes the job's attributes and its meta, parameterized
// and update blocks.
func (s *jobSpec) writeJobBlocks(w func(int, string, ...any)) {
	if s.namespace != "" {
		w(1, "namespace   = %s", hclString(s.namespace))
	}
	w(1, "type        = %q", s.jobType)
	w(1, `datacenters = ["*"]`)
	if len(s.meta) > 0 {
		w(1, "")
		writeMap(w, 1, "meta", s.meta)
	}
	if s.parameterized {
		w(1, "")
		w(1, "parameterized {")
		w(2, "meta_required = %s", hclList(s.metaRequired))
		w(2, "meta_optional = %s", hclList(s.metaOptional))
		w(1, "}")
	}
	if s.jobType == "service" {
		w(1, "")
		w(1, "update {")
		w(2, "max_parallel      = 1")
		w(2, `health_check      = "task_states"`)
		w(2, "min_healthy_time  = %q", s.minHealthyTime)
		w(2, "healthy_deadline  = %q", s.healthyDeadline)
		w(2, "progress_deadline = %q", s.progressDeadline)
		w(2, "auto_revert       = %t", s.autoRevert)
		w(2, "canary            = %d", s.canaries)
		w(2, "auto_promote      = %t", s.autoPromote)
		w(1, "}")
	}
}

// writeGroup writes the job's one group; a final group neither restarts
// nor reschedules a failed task.
func (s *jobSpec) writeGroup(w func(int, string, ...any), final bool) {
	w(1, `group "app" {`)
	w(2, "count = %d", s.count)
	if s.scalingMax > 0 {
		w(2, "")
		w(2, "scaling {")
		w(3, "enabled = true")
		w(3, "min     = %d", s.scalingMin)
		w(3, "max     = %d", s.scalingMax)
		w(2, "}")
	}
	if final {
		w(2, "")
		w(2, "restart {")
		w(3, "attempts = 0")
		w(3, `mode     = "fail"`)
		w(2, "}")
		w(2, "")
		w(2, "reschedule {")
		w(3, "attempts  = 0")
		w(3, "unlimited = false")
		w(2, "}")
	}
	w(2, "")
	// Small resources (the disk at Nomad's 10 MB minimum), so that many
	// test jobs fit on a dev agent's one client node.
	w(2, "ephemeral_disk {")
	w(3, "size = 10")
	w(2, "}")
	w(2, "")
	s.writeTask(w)
	w(1, "}")
}

// writeTask writes the group's one mock_driver task.
func (s *jobSpec) writeTask(w func(int, string, ...any)) {
	w(2, `task "app" {`)
	w(3, `driver = "mock_driver"`)
	w(3, "")
	w(3, "config {")
	if s.startError != "" {
		w(4, "start_error = %s", hclString(s.startError))
	} else {
		w(4, "run_for   = %q", s.runFor)
		w(4, "exit_code = %d", s.exitCode)
	}
	w(3, "}")
	if len(s.env) > 0 {
		w(3, "")
		writeMap(w, 3, "env", s.env)
	}
	w(3, "")
	w(3, "resources {")
	w(4, "cpu    = 10")
	w(4, "memory = 16")
	w(3, "}")
	w(3, "")
	w(3, "logs {")
	w(4, "max_files     = 1")
	w(4, "max_file_size = 1")
	w(3, "}")
	w(2, "}")
}

// writeMap writes an attribute `name = { "k" = "v" }`, the form that accepts
// any key, sorted by key.
func writeMap(w func(int, string, ...any), indent int, name string, m map[string]string) {
	w(indent, "%s = {", name)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		w(indent+1, "%s = %s", hclString(k), hclString(m[k]))
	}
	w(indent, "}")
}

func hclList(items []string) string {
	quoted := make([]string, len(items))
	for i, item := range items {
		quoted[i] = hclString(item)
	}
	return "[" + strings.Join(quoted, ", ") + "]"
}

// hclString quotes s as an HCL string literal that stands for exactly s:
// quotes, backslashes and control characters are escaped, and so are the
// template sequences "${" and "%{".
func hclString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case (r == '$' || r == '%') && i+1 < len(s) && s[i+1] == '{':
			b.WriteRune(r)
			b.WriteRune(r)
		case unicode.IsControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}
