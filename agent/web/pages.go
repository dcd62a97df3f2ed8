package web

import (
	"errors"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/holds"
)

// ClusterInfo is what the Cluster page shows.
type ClusterInfo struct {
	Node       string
	Version    string
	RaftState  string
	Leader     string
	LastIndex  uint64
	AppliedIdx uint64
	// LastContact is this follower's time since it heard from the
	// leader (0 on the leader).
	LastContact time.Duration
	Peers       []Peer
	Members     []Member
}

// Peer is one Raft server, as `nops operator raft list-peers` shows it.
type Peer struct {
	Node, ID, Address string
	Leader, Voter     bool
	RaftProtocol      string
}

// Member is one serf member; Refused says why every membership decision
// ignores it (it claims the node ID of a Raft peer it is not).
type Member struct {
	Name, Addr, Status, Version, Role string
	Refused                           string
}

// activeStates are the states of a running deployment.
var activeStates = []structs.DeploymentState{structs.StateDetected, structs.StatePreHook, structs.StateApplying, structs.StatePostHook}

func (u views) deployments(r *http.Request, q url.Values) ([]*structs.Deployment, error) {
	var out []*structs.Deployment
	err := u.get(r, "/v1/deployments?"+q.Encode(), &out)
	return out, err
}

type windowView struct {
	*structs.SyncWindow
	Open bool
	Next time.Time
}

func (u views) windowViews(list []*structs.SyncWindow) []windowView {
	now := u.cfg.Now()
	out := make([]windowView, 0, len(list))
	for _, w := range list {
		active, _ := holds.Active(w, now)
		out = append(out, windowView{SyncWindow: w, Open: active, Next: holds.NextBoundary([]*structs.SyncWindow{w}, now)})
	}
	return out
}

type overviewData struct {
	Cluster  *ClusterInfo
	Cycle    *structs.DetectionCycle
	Repos    []*structs.RepoStatus
	Counts   map[string]int
	Jobs     int
	Pending  []*structs.Deployment
	Running  []*structs.Deployment
	Failures []*structs.Deployment
	Pauses   []*structs.Pause
	Windows  []windowView
	NextEdge time.Time
	// Servers is each server's health as autopilot sees it on the
	// leader, for a viewer with the operator capability.
	Servers []structs.AutopilotServerHealth
}

func (u views) overview(w http.ResponseWriter, r *http.Request) {
	v := viewerOf(r)
	d := &overviewData{Counts: map[string]int{}}
	if v.cluster("read") {
		if c, err := u.cfg.Backend.Cluster(); err == nil {
			d.Cluster = c
		}
		_ = u.get(r, "/v1/repos", &d.Repos)
		var cycle structs.DetectionCycle
		if err := u.get(r, "/v1/status/cycle", &cycle); err == nil {
			d.Cycle = &cycle
		}
		var wins []*structs.SyncWindow
		if err := u.get(r, "/v1/windows", &wins); err == nil {
			d.Windows = u.windowViews(wins)
			d.NextEdge = holds.NextBoundary(wins, u.cfg.Now())
		}
	}
	if v.cluster("operator") {
		var health structs.AutopilotHealth
		if err := u.get(r, "/v1/operator/autopilot/health", &health); err == nil {
			d.Servers = health.Servers
		}
	}
	var jobs []*structs.JobSummary
	if err := u.get(r, "/v1/jobs", &jobs); err != nil && !notFound(err) {
		u.fail(w, r, err)
		return
	}
	d.Jobs = len(jobs)
	for _, j := range jobs {
		d.Counts[string(j.Sync)]++
	}
	var err error
	if d.Pending, err = u.deployments(r, url.Values{"state": {string(structs.StatePendingApproval)}}); err != nil {
		u.fail(w, r, err)
		return
	}
	for _, s := range activeStates {
		list, err := u.deployments(r, url.Values{"state": {string(s)}, "limit": {strconv.Itoa(activePerState)}})
		if err != nil {
			u.fail(w, r, err)
			return
		}
		d.Running = append(d.Running, list...)
	}
	sort.Slice(d.Running, func(i, j int) bool { return d.Running[i].CreateIndex > d.Running[j].CreateIndex })
	if d.Failures, err = u.deployments(r, url.Values{"state": {string(structs.StateFailed)}, "limit": {"5"}}); err != nil {
		u.fail(w, r, err)
		return
	}
	_ = u.get(r, "/v1/pauses", &d.Pauses)
	u.render(w, r, http.StatusOK, "overview", "Overview", d)
}

// activePerState bounds the active deployments the overview lists per
// state: a cluster rolls out far fewer at once, and the page stays short.
const activePerState = 50

// historyShown is how many of a job's past deployments its page lists:
// enough to see a pattern of failures; older ones are in the API.
const historyShown = 25

// jobsPerPage bounds the rows of the jobs page: a page stays small on a
// phone whatever the number of jobs.
const jobsPerPage = 100

type jobsData struct {
	Jobs       []*structs.JobSummary
	Total      int
	Matched    int
	Page       int
	Pages      int
	Query      url.Values
	Namespace  string
	Sync       string
	Policy     string
	Held       string
	Blocked    string
	Namespaces []string
}

func (u views) jobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := &jobsData{Namespace: q.Get("namespace"), Sync: q.Get("sync"), Policy: q.Get("policy"), Held: q.Get("held"), Blocked: q.Get("blocked")}
	var all []*structs.JobSummary
	if err := u.get(r, "/v1/jobs", &all); err != nil {
		u.fail(w, r, err)
		return
	}
	d.Total = len(all)
	seen := map[string]bool{}
	for _, j := range all {
		if !seen[j.Namespace] {
			seen[j.Namespace] = true
			d.Namespaces = append(d.Namespaces, j.Namespace)
		}
		if (d.Namespace != "" && j.Namespace != d.Namespace) || (d.Sync != "" && string(j.Sync) != d.Sync) ||
			(d.Policy != "" && string(j.Policy) != d.Policy) || (d.Held == "yes" && j.Hold == "") ||
			(d.Held == "no" && j.Hold != "") || (d.Blocked == "yes" && !j.Blocked) || (d.Blocked == "no" && j.Blocked) {
			continue
		}
		d.Jobs = append(d.Jobs, j)
	}
	sort.Strings(d.Namespaces)
	sort.Slice(d.Jobs, func(i, j int) bool { return d.Jobs[i].Key() < d.Jobs[j].Key() })
	d.Matched = len(d.Jobs)
	d.Pages = max(1, (d.Matched+jobsPerPage-1)/jobsPerPage)
	d.Page, _ = strconv.Atoi(q.Get("page"))
	d.Page = min(max(d.Page, 1), d.Pages)
	d.Jobs = d.Jobs[(d.Page-1)*jobsPerPage : min(d.Page*jobsPerPage, d.Matched)]
	d.Query = url.Values{}
	for _, k := range []string{"namespace", "sync", "policy", "held", "blocked"} {
		if v := q.Get(k); v != "" {
			d.Query.Set(k, v)
		}
	}
	u.render(w, r, http.StatusOK, "jobs", "Jobs", d)
}

type jobData struct {
	Detail  *structs.JobDetail
	History []*structs.Deployment
	// Drift is the diff the job's drift shows now (the status's), else
	// that of its active deployment, whose text DiffText is when it has
	// no tree.
	Drift    *structs.PlanDiff
	DiffText string
	NomadURL string
}

func (u views) job(w http.ResponseWriter, r *http.Request) {
	ns, id := r.PathValue("ns"), r.PathValue("id")
	d := &jobData{Detail: &structs.JobDetail{}}
	if err := u.get(r, "/v1/job/"+url.PathEscape(ns)+"/"+url.PathEscape(id), d.Detail); err != nil {
		u.fail(w, r, err)
		return
	}
	var err error
	if d.History, err = u.deployments(r, url.Values{"namespace": {ns}, "job": {id}, "limit": {strconv.Itoa(historyShown)}}); err != nil {
		u.fail(w, r, err)
		return
	}
	if s := d.Detail.Status; s != nil && s.Sync == structs.SyncDrift {
		d.Drift = s.Drift
	}
	if a := d.Detail.ActiveDeployment; a != nil && d.Drift == nil {
		d.Drift = a.PlanDiff
		if d.Drift == nil {
			d.DiffText = a.Diff
		}
	}
	d.NomadURL = u.nomadJob(ns, id)
	u.render(w, r, http.StatusOK, "job", structs.JobKey(ns, id), d)
}

type deploymentData struct {
	D        *structs.Deployment
	Events   []*structs.Event
	NomadURL string
	// CanaryWait is set while Nomad waits for the canaries' promotion.
	CanaryWait bool
	// Health is the Nomad deployment's health, read from Nomad now; nil
	// when the register created no Nomad deployment, HealthErr when Nomad
	// could not be read.
	Health    *structs.NomadHealth
	HealthErr string
}

func (u views) deployment(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	d := &deploymentData{D: &structs.Deployment{}}
	if err := u.get(r, "/v1/deployment/"+url.PathEscape(id), d.D); err != nil {
		u.fail(w, r, err)
		return
	}
	if err := u.get(r, "/v1/deployment/"+url.PathEscape(d.D.ID)+"/events", &d.Events); err != nil {
		u.fail(w, r, err)
		return
	}
	d.NomadURL = u.nomadJob(d.D.Namespace, d.D.JobID)
	d.CanaryWait = d.D.State == structs.StateApplying && d.D.Registered && d.D.HealthDeadline.IsZero()
	if d.D.NomadDeploymentID != "" {
		var h structs.NomadHealth
		if err := u.get(r, "/v1/deployment/"+url.PathEscape(d.D.ID)+"/nomad", &h); err != nil {
			d.HealthErr = err.Error()
		} else if h.Deployment {
			d.Health = &h
		}
	}
	u.render(w, r, http.StatusOK, "deployment", "Deployment "+structs.ShortID(d.D.ID), d)
}

func (u views) approvals(w http.ResponseWriter, r *http.Request) {
	list, err := u.deployments(r, url.Values{"state": {string(structs.StatePendingApproval)}})
	if err != nil {
		u.fail(w, r, err)
		return
	}
	// Oldest first: the queue.
	sort.Slice(list, func(i, j int) bool { return list[i].CreateIndex < list[j].CreateIndex })
	u.render(w, r, http.StatusOK, "approvals", "Approvals", list)
}

func (u views) pauses(w http.ResponseWriter, r *http.Request) {
	var list []*structs.Pause
	if err := u.get(r, "/v1/pauses", &list); err != nil {
		u.fail(w, r, err)
		return
	}
	global := false
	for _, p := range list {
		global = global || p.Global
	}
	u.render(w, r, http.StatusOK, "pauses", "Pauses", map[string]any{"Pauses": list, "Global": global})
}

// windowForm is the form of a new window, with the problem of each field.
type windowForm struct {
	Name, Kind, Schedule, Duration, Timezone, Namespaces, Jobs string
	Errors                                                     map[string]string
	Other                                                      []string
}

type windowsData struct {
	Windows []windowView
	Form    *windowForm
}

func (u views) windows(w http.ResponseWriter, r *http.Request) {
	u.renderWindows(w, r, http.StatusOK, &windowForm{Kind: "deny", Timezone: "UTC"})
}

func (u views) renderWindows(w http.ResponseWriter, r *http.Request, code int, form *windowForm) {
	var list []*structs.SyncWindow
	if err := u.get(r, "/v1/windows", &list); err != nil {
		// A token that may write windows but not read the cluster
		// still sees its form and its errors.
		var ae *APIError
		if !errors.As(err, &ae) || ae.Code != http.StatusForbidden || form.Errors == nil {
			u.fail(w, r, err)
			return
		}
	}
	u.render(w, r, code, "windows", "Windows", &windowsData{Windows: u.windowViews(list), Form: form})
}

func (u views) orphans(w http.ResponseWriter, r *http.Request) {
	var list []*structs.JobStatus
	if err := u.get(r, "/v1/orphans", &list); err != nil {
		u.fail(w, r, err)
		return
	}
	u.render(w, r, http.StatusOK, "orphans", "Orphans", list)
}

// maxEventsShown bounds the events page.
const maxEventsShown = 200

type eventsData struct {
	Events []*structs.Event
	Kind   string
	Object string
	Since  string
	More   bool
}

func (u views) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := &eventsData{Kind: q.Get("kind"), Object: q.Get("object"), Since: q.Get("since")}
	api := url.Values{}
	if d.Kind != "" {
		api.Set("kind", d.Kind)
	}
	if d.Object != "" {
		api.Set("object", d.Object)
	}
	since := d.Since
	if since == "" {
		since = u.cfg.Now().Add(-24 * time.Hour).UTC().Format(time.RFC3339)
	}
	api.Set("since", since)
	if err := u.get(r, "/v1/events?"+api.Encode(), &d.Events); err != nil {
		u.fail(w, r, err)
		return
	}
	// Newest first, bounded.
	for i, j := 0, len(d.Events)-1; i < j; i, j = i+1, j-1 {
		d.Events[i], d.Events[j] = d.Events[j], d.Events[i]
	}
	if len(d.Events) > maxEventsShown {
		d.Events, d.More = d.Events[:maxEventsShown], true
	}
	u.render(w, r, http.StatusOK, "events", "Events", d)
}

func (u views) cluster(w http.ResponseWriter, r *http.Request) {
	c, err := u.cfg.Backend.Cluster()
	if err != nil {
		u.fail(w, r, err)
		return
	}
	u.render(w, r, http.StatusOK, "cluster", "Cluster", c)
}

// nomadJob links a job to the Nomad UI, or "".
func (u *UI) nomadJob(ns, id string) string {
	if u.cfg.NomadUIURL == "" || id == "" {
		return ""
	}
	return u.cfg.NomadUIURL + "/ui/jobs/" + url.PathEscape(id+"@"+ns)
}

// notFound reports an API 404: a server that runs without the reconcilers'
// routes (in tests) shows empty panels rather than an error.
func notFound(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.Code == http.StatusNotFound
}

func since(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	future := d < 0
	if future {
		d = -d
	}
	var s string
	switch {
	case d < time.Minute:
		s = strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		s = strconv.Itoa(int(d.Minutes())) + "m"
	case d < 48*time.Hour:
		s = strconv.Itoa(int(d.Hours())) + "h"
	default:
		s = strconv.Itoa(int(d.Hours()/24)) + "d"
	}
	if future {
		return "in " + s
	}
	return s + " ago"
}

func stateClass(s string) string {
	switch s {
	case string(structs.StateCompleted), string(structs.SyncInSync), "succeeded", "alive":
		return "ok"
	case string(structs.StateFailed), string(structs.StateRejected), string(structs.SyncError), "failed-member":
		return "bad"
	case string(structs.StatePendingApproval), string(structs.SyncDrift):
		return "warn"
	case string(structs.StateSuperseded):
		return "muted"
	}
	return "info"
}
