package web

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/nops-dev/nops/fsm"
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
	// ID is the node ID the member gossips; HTTPAddr its HTTP address
	// (host:port): where its dashboard is.
	ID, HTTPAddr string
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
	// NextLocal is Next in the window's own time zone, as its schedule
	// reads.
	NextLocal string
}

func (u views) windowViews(list []*structs.SyncWindow) []windowView {
	now := u.cfg.Now()
	out := make([]windowView, 0, len(list))
	for _, w := range list {
		active, _ := holds.Active(w, now)
		v := windowView{SyncWindow: w, Open: active, Next: holds.NextBoundary([]*structs.SyncWindow{w}, now)}
		if !v.Next.IsZero() {
			v.NextLocal = inZone(v.Next, w.Timezone)
		}
		out = append(out, v)
	}
	return out
}

// inZone writes a time in an IANA time zone (UTC when empty or unknown),
// with the zone's abbreviation and name.
func inZone(t time.Time, zone string) string {
	loc, err := time.LoadLocation(zone)
	if err != nil || zone == "" {
		loc, zone = time.UTC, "UTC"
	}
	s := t.In(loc).Format("Mon 2 Jan 2006 15:04 MST")
	if abbr, _ := t.In(loc).Zone(); abbr != zone {
		s += " (" + zone + ")"
	}
	return s
}

type overviewData struct {
	withClusters
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
	// Unsettled is set while a server is unhealthy or a member is not
	// alive: autopilot's view then changes without a write, and the
	// page looks again every few seconds.
	Unsettled bool
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
		for _, s := range d.Servers {
			d.Unsettled = d.Unsettled || !s.Healthy
		}
	}
	if d.Cluster != nil {
		for _, m := range d.Cluster.Members {
			d.Unsettled = d.Unsettled || (m.Status != "alive" && m.Refused == "")
		}
	}
	var jobs []*structs.JobSummary
	if err := u.get(r, "/v1/jobs", &jobs); err != nil && !notFound(err) {
		u.fail(w, r, err)
		return
	}
	d.Jobs = len(jobs)
	var seen []string
	for _, j := range jobs {
		d.Counts[string(j.Sync)]++
		seen = append(seen, j.Cluster)
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
	for _, list := range [][]*structs.Deployment{d.Pending, d.Running, d.Failures} {
		for _, x := range list {
			seen = append(seen, x.Cluster)
		}
	}
	d.C = u.withStatus(r, u.clusterView(r, seen...))
	u.render(w, r, http.StatusOK, "overview", "Overview", d)
}

// activePerState bounds the active deployments the overview lists per
// state: a cluster rolls out far fewer at once, and the page stays short.
const activePerState = 50

// historyShown is how many of a job's past deployments its page lists:
// enough to see a pattern of failures; older ones are in the API.
const historyShown = 25

// maxSearch bounds the jobs page's search, past any namespace/job key.
const maxSearch = 256

// jobsPerPage bounds the rows of the jobs page: a page stays small on a
// phone whatever the number of jobs.
const jobsPerPage = 100

type jobsData struct {
	withClusters
	// Q is the search: a part of namespace/job, any case.
	Q          string
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
	// Cluster filters by Nomad cluster (SPEC section 16).
	Cluster string
}

func (u views) jobs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := &jobsData{Q: strings.TrimSpace(q.Get("q")), Namespace: q.Get("namespace"), Sync: q.Get("sync"), Policy: q.Get("policy"), Held: q.Get("held"), Blocked: q.Get("blocked"),
		Cluster: q.Get("cluster")}
	if len(d.Q) > maxSearch {
		d.Q = d.Q[:maxSearch]
	}
	if len(d.Cluster) > maxSearch {
		d.Cluster = d.Cluster[:maxSearch]
	}
	search := strings.ToLower(d.Q)
	var all []*structs.JobSummary
	if err := u.get(r, "/v1/jobs", &all); err != nil {
		u.fail(w, r, err)
		return
	}
	d.Total = len(all)
	seen := map[string]bool{}
	var clusters []string
	for _, j := range all {
		if !seen[j.Namespace] {
			seen[j.Namespace] = true
			d.Namespaces = append(d.Namespaces, j.Namespace)
		}
		clusters = append(clusters, j.Cluster)
		if (d.Cluster != "" && structs.ClusterName(j.Cluster) != d.Cluster) || (d.Namespace != "" && j.Namespace != d.Namespace) || (d.Sync != "" && string(j.Sync) != d.Sync) ||
			(d.Policy != "" && string(j.Policy) != d.Policy) || (d.Held == "yes" && j.Hold == "") ||
			(d.Held == "no" && j.Hold != "") || (d.Blocked == "yes" && !j.Blocked) || (d.Blocked == "no" && j.Blocked) ||
			(search != "" && !strings.Contains(strings.ToLower(j.Key()), search)) {
			continue
		}
		d.Jobs = append(d.Jobs, j)
	}
	sort.Strings(d.Namespaces)
	// By cluster, then namespace and ID.
	sort.Slice(d.Jobs, func(i, j int) bool {
		a, b := d.Jobs[i], d.Jobs[j]
		if ca, cb := structs.ClusterName(a.Cluster), structs.ClusterName(b.Cluster); ca != cb {
			return ca < cb
		}
		return a.Namespace+"/"+a.JobID < b.Namespace+"/"+b.JobID
	})
	d.Matched = len(d.Jobs)
	d.Pages = max(1, (d.Matched+jobsPerPage-1)/jobsPerPage)
	d.Page, _ = strconv.Atoi(q.Get("page"))
	d.Page = min(max(d.Page, 1), d.Pages)
	d.Jobs = d.Jobs[(d.Page-1)*jobsPerPage : min(d.Page*jobsPerPage, d.Matched)]
	d.Query = url.Values{}
	for _, k := range []string{"q", "cluster", "namespace", "sync", "policy", "held", "blocked"} {
		if v := q.Get(k); v != "" {
			d.Query.Set(k, v)
		}
	}
	d.C = u.clusterView(r, clusters...)
	d.C.forced = d.Cluster != ""
	if d.Cluster != "" {
		d.C.see(d.Cluster)
	}
	u.render(w, r, http.StatusOK, "jobs", "Jobs", d)
}

type jobData struct {
	withClusters
	Detail  *structs.JobDetail
	History []*structs.Deployment
	// Drift is the diff the job's drift shows now (the status's), else
	// that of its active deployment, whose text DiffText is when it has
	// no tree.
	Drift    *structs.PlanDiff
	DiffText string
	NomadURL string
	// Cluster is the status of the job's Nomad cluster, when the viewer
	// may read it.
	Cluster *structs.ClusterStatus
}

// deployNowCase says what deploy now does for a job as it stands:
// "paused" (nothing until it is resumed), "lifted" (already requested),
// "window" (it lifts the closed window), "drift", "error" or "in_sync"
// (a check at once).
func deployNowCase(d *structs.JobDetail) string {
	s := d.Status
	switch {
	case d.Pause != nil || (s != nil && strings.HasPrefix(s.Hold, "paused")):
		return "paused"
	case s == nil:
		return "in_sync"
	case strings.HasPrefix(s.Hold, "sync window:") && strings.HasSuffix(s.Hold, "(deploy now requested)"):
		return "lifted"
	case strings.HasPrefix(s.Hold, "sync window:"):
		return "window"
	}
	return string(s.Sync)
}

// deployNowHint explains the Deploy now button for a job as it stands.
func deployNowHint(d *structs.JobDetail) string {
	switch deployNowCase(d) {
	case "paused":
		return "The job is paused: deploy now does not lift a pause. Resume the job to deploy it."
	case "lifted":
		return "Deploy now is already requested: the next deployment runs despite the closed sync window."
	case "window":
		return "A closed sync window holds this job (" + strings.TrimPrefix(d.Status.Hold, "sync window: ") +
			"). Deploy now lifts it for the next deployment, which then follows the job's policy."
	case string(structs.SyncDrift):
		return "The job differs from git. Deploy now checks it at once instead of at the next cycle; the deployment follows the job's policy."
	case string(structs.SyncError):
		return "The job's last check failed. Deploy now checks it again at once."
	}
	return "The job is in sync with git: there is nothing to deploy. Deploy now checks git and Nomad at once, " +
		"and lets the job's next change deploy even while a sync window is closed."
}

func (u views) job(w http.ResponseWriter, r *http.Request) {
	ns, id, cluster := r.PathValue("ns"), r.PathValue("id"), r.URL.Query().Get("cluster")
	d := &jobData{Detail: &structs.JobDetail{}}
	path := "/v1/job/" + url.PathEscape(ns) + "/" + url.PathEscape(id)
	if cluster != "" {
		path += "?cluster=" + url.QueryEscape(cluster)
	}
	if err := u.get(r, path, d.Detail); err != nil {
		u.fail(w, r, err)
		return
	}
	if s := d.Detail.Status; s != nil {
		cluster = s.Cluster
	}
	var err error
	if d.History, err = u.deployments(r, url.Values{"cluster": {cluster}, "namespace": {ns}, "job": {id}, "limit": {strconv.Itoa(historyShown)}}); err != nil {
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
	d.C = u.withStatus(r, u.clusterView(r, cluster))
	d.Cluster = d.C.Status(cluster)
	d.NomadURL = d.C.NomadJob(cluster, ns, id)
	u.render(w, r, http.StatusOK, "job", structs.JobKey(cluster, ns, id), d)
}

type deploymentData struct {
	withClusters
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
	// SupersededBy is the job's deployment that replaced a superseded
	// one, when the viewer may see it.
	SupersededBy *structs.Deployment
}

func (d *deploymentData) errorLink() *link {
	if n := d.SupersededBy; n != nil {
		return &link{Href: "/ui/deployment/" + n.ID, Text: "See deployment " + structs.ShortID(n.ID) + " (" + string(n.State) + "), which superseded it."}
	}
	return nil
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
	if d.D.State == structs.StateSuperseded {
		d.SupersededBy = u.successor(r, d.D)
	}
	d.C = u.clusterView(r, d.D.Cluster)
	d.NomadURL = d.C.NomadJob(d.D.Cluster, d.D.Namespace, d.D.JobID)
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

// successor returns the oldest deployment of the same job created after
// d: the one that superseded it, or nil.
func (u views) successor(r *http.Request, d *structs.Deployment) *structs.Deployment {
	list, err := u.deployments(r, url.Values{"cluster": {structs.ClusterName(d.Cluster)}, "namespace": {d.Namespace}, "job": {d.JobID},
		"limit": {strconv.Itoa(historyShown)}})
	if err != nil {
		return nil
	}
	var next *structs.Deployment
	for _, x := range list {
		if x.CreateIndex > d.CreateIndex && (next == nil || x.CreateIndex < next.CreateIndex) {
			next = x
		}
	}
	return next
}

type confirmData struct {
	withClusters
	D      *structs.Deployment
	Reason string
	// Error is the reason field's problem.
	Error string
}

// confirmReject asks to confirm a rejection, with its reason, which is
// required.
func (u views) confirmReject(w http.ResponseWriter, r *http.Request, reason string) {
	d := &structs.Deployment{}
	if err := u.get(r, "/v1/deployment/"+url.PathEscape(r.PathValue("id")), d); err != nil {
		// A token may approve without reading the job: it confirms the
		// deployment by its ID alone.
		var ae *APIError
		if !errors.As(err, &ae) || ae.Code != http.StatusForbidden {
			u.fail(w, r, err)
			return
		}
		d = &structs.Deployment{ID: r.PathValue("id")}
	}
	c := &confirmData{D: d, Reason: reason}
	c.C = u.clusterView(r, d.Cluster)
	code := http.StatusOK
	if reason == "" {
		c.Error = "Give a reason: it is recorded with the rejection and sent with its notifications."
		code = http.StatusBadRequest
	}
	u.render(w, r, code, "confirm", "Reject deployment "+structs.ShortID(d.ID)+"?", c)
}

func (u views) approvals(w http.ResponseWriter, r *http.Request) {
	list, err := u.deployments(r, url.Values{"state": {string(structs.StatePendingApproval)}})
	if err != nil {
		u.fail(w, r, err)
		return
	}
	// Oldest first: the queue.
	sort.Slice(list, func(i, j int) bool { return list[i].CreateIndex < list[j].CreateIndex })
	d := &deploymentList{List: list}
	d.C = u.clusterView(r, deploymentClusters(list)...)
	u.render(w, r, http.StatusOK, "approvals", "Approvals", d)
}

// deploymentsShown bounds the deployments page: the newest ones; a filter
// reaches older ones.
const deploymentsShown = 100

// deploymentsData is the deployments page: the newest deployments that
// match the filter, which the API applies.
type deploymentsData struct {
	withClusters
	List []*structs.Deployment
	// The filter: a cluster, a namespace and a job ID (exact), a state.
	Cluster, Namespace, Job, State string
	States                         []structs.DeploymentState
	// More is set when older deployments match too.
	More bool
}

func (u views) deploymentsPage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	get := func(k string) string {
		v := strings.TrimSpace(q.Get(k))
		if len(v) > filterLen {
			v = v[:filterLen]
		}
		return v
	}
	d := &deploymentsData{Cluster: get("cluster"), Namespace: get("namespace"), Job: get("job"), State: get("state"),
		States: structs.AllStates}
	api := url.Values{"limit": {strconv.Itoa(deploymentsShown + 1)}}
	for k, v := range map[string]string{"cluster": d.Cluster, "namespace": d.Namespace, "job": d.Job, "state": d.State} {
		if v != "" {
			api.Set(k, v)
		}
	}
	list, err := u.deployments(r, api)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	if len(list) > deploymentsShown {
		list, d.More = list[:deploymentsShown], true
	}
	d.List = list
	d.C = u.clusterView(r, deploymentClusters(list)...)
	if d.Cluster != "" {
		d.C.forced = true
		d.C.see(d.Cluster)
	}
	u.render(w, r, http.StatusOK, "deployments", "Deployments", d)
}

// deploymentList is a page of deployments (the approval queue).
type deploymentList struct {
	withClusters
	List []*structs.Deployment
}

// deploymentClusters lists the clusters of deployments.
func deploymentClusters(list []*structs.Deployment) []string {
	out := make([]string, 0, len(list))
	for _, d := range list {
		out = append(out, d.Cluster)
	}
	return out
}

type pausesData struct {
	withClusters
	Pauses []*structs.Pause
	// Global is set while every job is paused; ClusterPaused names each
	// Nomad cluster every job of which is paused.
	Global        bool
	ClusterPaused map[string]bool
}

type orphansData struct {
	withClusters
	List []*structs.JobStatus
}

func (u views) pauses(w http.ResponseWriter, r *http.Request) {
	var list []*structs.Pause
	if err := u.get(r, "/v1/pauses", &list); err != nil {
		u.fail(w, r, err)
		return
	}
	d := &pausesData{Pauses: list, ClusterPaused: map[string]bool{}}
	var seen []string
	for _, p := range list {
		d.Global = d.Global || p.Global
		if !p.Global {
			seen = append(seen, p.Cluster)
			if p.JobID == "" {
				d.ClusterPaused[structs.ClusterName(p.Cluster)] = true
			}
		}
	}
	d.C = u.clusterView(r, seen...)
	u.render(w, r, http.StatusOK, "pauses", "Pauses", d)
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
	d := &orphansData{}
	if err := u.get(r, "/v1/orphans", &d.List); err != nil {
		u.fail(w, r, err)
		return
	}
	var seen []string
	for _, s := range d.List {
		seen = append(seen, s.Cluster)
	}
	d.C = u.clusterView(r, seen...)
	u.render(w, r, http.StatusOK, "orphans", "Orphans", d)
}

// maxEventsShown bounds the events page.
const maxEventsShown = 200

// eventKinds are the kinds of the audit log, for the events filter.
var eventKinds = []string{fsm.EventKindACL, structs.EventKindDeployment, structs.EventKindJob,
	structs.EventKindOperator, structs.EventKindPause, structs.EventKindRepository, structs.EventKindWindow}

type eventsData struct {
	withClusters
	Events []*structs.Event
	Kinds  []string
	// The filter: Kind is one of Kinds; Namespace a prefix of the
	// namespace; Job a part of the job ID; Object a prefix of the object
	// (a deployment ID, namespace/job, a window); Since a time, an
	// event sequence number or how long ago (1h, 30m, 7d); Cluster a
	// Nomad cluster (its events and those of no cluster, such as a
	// global pause).
	Kind, Namespace, Job, Object, Since, Cluster string
	// Errors is each field's problem.
	Errors map[string]string
	More   bool
}

// filterLen bounds each field of the events filter.
const filterLen = 256

func (u views) events(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	get := func(k string) string {
		v := strings.TrimSpace(q.Get(k))
		if len(v) > filterLen {
			v = v[:filterLen]
		}
		return v
	}
	d := &eventsData{Kinds: eventKinds, Kind: get("kind"), Namespace: get("namespace"), Job: get("job"),
		Object: get("object"), Since: get("since"), Cluster: get("cluster"), Errors: map[string]string{}}
	d.C = u.clusterView(r)
	d.C.forced = d.Cluster != ""
	api := url.Values{}
	if d.Cluster != "" {
		api.Set("cluster", d.Cluster)
	}
	if d.Kind != "" {
		if !slices.Contains(eventKinds, d.Kind) {
			d.Errors["kind"] = fmt.Sprintf("%q is not a kind of event: pick one of the list", d.Kind)
		}
		api.Set("kind", d.Kind)
	}
	since, err := parseSince(d.Since, u.cfg.Now())
	if err != nil {
		d.Errors["since"] = err.Error()
	}
	api.Set("since", since)
	if len(d.Errors) > 0 {
		u.render(w, r, http.StatusBadRequest, "events", "Events", d)
		return
	}
	var all []*structs.Event
	if err := u.get(r, "/v1/events?"+api.Encode(), &all); err != nil {
		var ae *APIError
		if !errors.As(err, &ae) || ae.Code != http.StatusBadRequest {
			u.fail(w, r, err)
			return
		}
		for _, p := range ae.Problems {
			name, msg, ok := strings.Cut(p, ": ")
			if ok && (name == "kind" || name == "since" || name == "cluster") {
				d.Errors[name] = msg
			} else {
				d.Errors["since"] = p
			}
		}
		u.render(w, r, http.StatusBadRequest, "events", "Events", d)
		return
	}
	// Newest first, filtered, bounded.
	for i := len(all) - 1; i >= 0; i-- {
		e := all[i]
		if (d.Namespace != "" && (e.JobID == "" || !strings.HasPrefix(e.Namespace, d.Namespace))) ||
			(d.Job != "" && !strings.Contains(strings.ToLower(e.JobID), strings.ToLower(d.Job))) ||
			(d.Object != "" && !strings.HasPrefix(e.Object, d.Object)) {
			continue
		}
		if len(d.Events) == maxEventsShown {
			d.More = true
			break
		}
		d.Events = append(d.Events, e)
	}
	// The view made above, with the clusters the rows name.
	for _, e := range d.Events {
		if e.Cluster != "" {
			d.C.see(e.Cluster)
		}
	}
	u.render(w, r, http.StatusOK, "events", "Events", d)
}

// parseSince turns the events filter's since into the API's: empty is the
// last 24 hours; a duration (1h, 30m, 7d) is that long before now; an RFC
// 3339 time, a date or a sequence number is passed on.
func parseSince(s string, now time.Time) (string, error) {
	switch {
	case s == "":
		return now.Add(-24 * time.Hour).UTC().Format(time.RFC3339), nil
	case strings.Trim(s, "0123456789") == "":
		return s, nil
	}
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t.UTC().Format(time.RFC3339), nil
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t.UTC().Format(time.RFC3339), nil
	}
	d, err := time.ParseDuration(s)
	if n, ok := strings.CutSuffix(s, "d"); ok && err != nil {
		var days int
		if days, err = strconv.Atoi(n); err == nil {
			d = time.Duration(days) * 24 * time.Hour
		}
	}
	if err != nil || d <= 0 {
		return "", fmt.Errorf("%q is not a time: give how long ago (1h, 30m, 7d), a date (2006-01-02), an RFC 3339 time or an event sequence number", s)
	}
	return now.Add(-d).UTC().Format(time.RFC3339), nil
}

func (u views) cluster(w http.ResponseWriter, r *http.Request) {
	c, err := u.cfg.Backend.Cluster()
	if err != nil {
		u.fail(w, r, err)
		return
	}
	u.render(w, r, http.StatusOK, "cluster", "Cluster", c)
}

// missing answers a dashboard address that names no page.
func (u views) missing(w http.ResponseWriter, r *http.Request) {
	u.render(w, r, http.StatusNotFound, "error", "Page not found", map[string]any{"Code": http.StatusNotFound,
		"Message": "There is no page at " + r.URL.Path + "."})
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
	case string(structs.StateSuperseded), string(structs.StateExpired):
		return "muted"
	}
	return "info"
}

// previewData is the preview page (SPEC section 19): the form, the
// repositories it offers and, once asked, the answer or why there is
// none.
type previewData struct {
	Repos           []string
	Repository, Ref string
	Result          *structs.Preview
	Error           string
}

// previewRepos fills in the names of the watched repositories, when the
// viewer may list them; the form takes a name typed in otherwise.
func (u views) previewRepos(r *http.Request, d *previewData) {
	var repos []*structs.RepoStatus
	if err := u.get(r, "/v1/repos", &repos); err == nil {
		for _, rp := range repos {
			d.Repos = append(d.Repos, rp.Name)
		}
	}
	if d.Repository == "" && len(d.Repos) == 1 {
		d.Repository = d.Repos[0]
	}
}

func (u views) preview(w http.ResponseWriter, r *http.Request) {
	d := &previewData{}
	u.previewRepos(r, d)
	u.render(w, r, http.StatusOK, "preview", "Preview", d)
}

// previewRun asks the API for a preview and shows it under the form. A
// preview writes nothing, but it costs the leader a plan of every managed
// job: the form is a POST with the session's CSRF token, as every form is.
// A refusal (unknown ref, another preview running, too many jobs) shows
// on the page, beside the form.
func (u views) previewRun(w http.ResponseWriter, r *http.Request) {
	if err := u.checkCSRF(r); err != nil {
		u.fail(w, r, err)
		return
	}
	d := &previewData{Repository: strings.TrimSpace(r.PostFormValue("repository")), Ref: strings.TrimSpace(r.PostFormValue("ref"))}
	u.previewRepos(r, d)
	resp, err := u.cfg.Backend.Do(r.Context(), viewerOf(r), http.MethodPost, "/v1/preview",
		&structs.PreviewRequest{Repository: d.Repository, Ref: d.Ref})
	if err != nil {
		u.fail(w, r, err)
		return
	}
	code := http.StatusOK
	switch {
	case resp.Code == http.StatusUnauthorized:
		u.fail(w, r, resp.Err())
		return
	case !resp.OK():
		code, d.Error = resp.Code, resp.Err().Error()
	default:
		if err := resp.Decode(&d.Result); err != nil {
			u.fail(w, r, err)
			return
		}
	}
	u.render(w, r, code, "preview", "Preview", d)
}
