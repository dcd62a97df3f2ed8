package agenthttp

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/raft"

	"github.com/nops-dev/nops/agent/acl"
	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/agent/snapshot"
	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/holds"
)

// routes registers the routes of every group.
func (a *httpAPI) routes(route func(pattern, kind string, rule routeRule, fn handlerFunc)) {
	a.cluster.routes(route)
	a.cluster.promotionRoutes(route)
	a.operator.routes(route)
	a.reconcileRoutes(route)
	a.acl.aclRoutes(route)
	a.sso.ssoRoutes(route)
	a.uiRoutes(route)
}

// routes of the cluster's state: status, agent, health, deployments,
// pauses, windows, events and notifications.
func (a *clusterAPI) routes(route func(pattern, kind string, rule routeRule, fn handlerFunc)) {
	route("GET /v1/status/leader", kindRead, public(), a.statusLeader)
	route("GET /v1/status/peers", kindRead, public(), a.statusPeers)
	route("GET /v1/status/node", kindRead, public(), a.statusNode)
	// The leader's autopilot reads every server's Raft stats (last index,
	// term and contact) without a token, so it must work with ACLs on.
	route("GET /v1/status/raft", kindRead, public(), a.agentRaftStats)
	route("GET /v1/agent/self", kindRead, onCluster(acl.Read), a.agentSelf)
	route("GET /v1/agent/members", kindRead, onCluster(acl.Read), a.agentMembers)
	route("GET /v1/health", kindRead, public(), a.health)

	route("GET /v1/deployments", kindRead, filtered(acl.Read), a.deploymentList)
	route("GET /v1/deployment/{id}", kindRead, onDeployment(acl.Read), a.deploymentGet)
	route("GET /v1/deployment/{id}/events", kindRead, onDeployment(acl.Read), a.deploymentEvents)
	route("POST /v1/deployment/{id}/approve", kindWrite, onDeployment(acl.Approve), a.deploymentApprove)
	route("POST /v1/deployment/{id}/reject", kindWrite, onDeployment(acl.Approve), a.deploymentReject)

	route("GET /v1/pauses", kindRead, filtered(acl.Read), a.pauseList)
	route("POST /v1/pause", kindWrite, onCluster(acl.Pause), a.pauseAll)
	route("POST /v1/resume", kindWrite, onCluster(acl.Pause), a.resumeAll)
	route("POST /v1/job/{ns}/{id}/pause", kindWrite, onJob(acl.Pause), a.jobPause)
	route("POST /v1/job/{ns}/{id}/resume", kindWrite, onJob(acl.Pause), a.jobResume)
	route("POST /v1/job/{ns}/{id}/deploy-now", kindWrite, onJob(acl.Deploy), a.jobDeployNow)

	route("GET /v1/windows", kindRead, onCluster(acl.Read), a.windowList)
	route("GET /v1/window/{name}", kindRead, onCluster(acl.Read), a.windowGet)
	route("PUT /v1/window/{name}", kindWrite, onCluster(acl.Windows), a.windowPut)
	route("DELETE /v1/window/{name}", kindWrite, onCluster(acl.Windows), a.windowDelete)

	route("GET /v1/events", kindRead, filtered(acl.Read), a.eventList)
	a.notifyRoutes(route)
}

// routes of the operator: Raft, snapshots, keyring, autopilot, GC,
// monitor and debug.
func (a *operatorAPI) routes(route func(pattern, kind string, rule routeRule, fn handlerFunc)) {
	route("GET /v1/operator/raft/configuration", kindRead, onCluster(acl.Operator), a.raftConfiguration)
	route("DELETE /v1/operator/raft/peer", kindWrite, onCluster(acl.Operator), a.raftRemovePeer)
	route("POST /v1/operator/raft/transfer-leadership", kindWrite, onCluster(acl.Operator), a.raftTransfer)
	// A snapshot holds the ACL tables (token hashes, SSO client secrets)
	// and restoring one replaces them: saving or restoring it is as
	// powerful as the acl capability, which it needs.
	route("GET /v1/operator/snapshot", kindWrite, onCluster(acl.ACLWrite), a.snapshotSave)
	route("PUT /v1/operator/snapshot", kindWrite, onCluster(acl.ACLWrite), a.snapshotRestore)
	route("GET /v1/operator/keyring", kindRead, onCluster(acl.Operator), a.keyringList)
	route("POST /v1/operator/keyring/install", kindWrite, onCluster(acl.Operator), a.keyringChange("install"))
	route("POST /v1/operator/keyring/use", kindWrite, onCluster(acl.Operator), a.keyringChange("use"))
	route("DELETE /v1/operator/keyring", kindWrite, onCluster(acl.Operator), a.keyringChange("remove"))
	route("GET /v1/operator/autopilot/configuration", kindRead, onCluster(acl.Operator), a.autopilotGetConfig)
	route("PUT /v1/operator/autopilot/configuration", kindWrite, onCluster(acl.Operator), a.autopilotSetConfig)
	route("GET /v1/operator/autopilot/health", kindLeaderRead, onCluster(acl.Operator), a.autopilotHealth)
	route("POST /v1/operator/gc", kindWrite, onCluster(acl.Operator), a.operatorGC)
	route("GET /v1/agent/monitor", kindRead, onCluster(acl.Operator), a.agentMonitor)
	route("GET /v1/agent/debug/{item}", kindRead, onCluster(acl.Operator), a.agentDebug)
	route("GET /debug/pprof/", kindRead, onCluster(acl.Operator), a.debugPprof)
}

func (a *clusterAPI) statusLeader(_ http.ResponseWriter, _ *http.Request) (any, error) {
	addr, _ := a.s.Leader()
	return addr, nil
}

func (a *clusterAPI) statusPeers(_ http.ResponseWriter, _ *http.Request) (any, error) {
	f := a.s.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("raft configuration: %w", err)
	}
	peers := []string{}
	for _, srv := range f.Configuration().Servers {
		peers = append(peers, string(srv.Address))
	}
	return peers, nil
}

func (a *clusterAPI) statusNode(_ http.ResponseWriter, _ *http.Request) (any, error) {
	return &structs.NodeStatus{NodeID: a.s.NodeID(), Name: a.s.NodeName()}, nil
}

func (a *apiBase) agentSelf(_ http.ResponseWriter, _ *http.Request) (any, error) {
	s := a.s
	leader, leaderID := s.Leader()
	return &structs.AgentSelf{
		NodeID: s.NodeID(), Name: s.NodeName(), Version: s.Version(), HTTPAddr: s.HTTPAddr(), RPCAddr: s.RPCAddr(),
		SerfAddr: s.SerfAddr(), RaftState: s.Raft().State().String(), Leader: leader, LeaderID: leaderID,
		IsLeader: s.IsLeader(), LoopsOn: s.LeaderLoopsRunning(), Stats: s.Raft().Stats(), Dev: s.Config().Dev,
		Namespaces: s.Config().Namespaces,
	}, nil
}

func (a *clusterAPI) agentMembers(_ http.ResponseWriter, _ *http.Request) (any, error) {
	out := []structs.Member{}
	refused := a.s.Refusals()
	for _, m := range a.s.Members() {
		out = append(out, structs.Member{Name: m.Name, Addr: m.Addr.String(), Port: m.Port, Status: m.Status.String(), Tags: m.Tags,
			Refused: refused[m.Name]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (a *clusterAPI) health(w http.ResponseWriter, _ *http.Request) (any, error) {
	leader, _ := a.s.Leader()
	if leader == "" {
		return nil, &HTTPError{Code: http.StatusServiceUnavailable, Msg: structs.ErrNoLeader.Error()}
	}
	return &structs.Health{Status: "ok", Leader: leader, Node: a.s.NodeName()}, nil
}

func (a *clusterAPI) deploymentList(w http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	var problems []string
	f := fsm.DeploymentFilter{Cluster: q.Get("cluster"), Namespace: q.Get("namespace"), JobID: q.Get("job"), State: structs.DeploymentState(q.Get("state"))}
	if err := a.checkCluster(f.Cluster); err != nil {
		problems = append(problems, err.Error())
	}
	if f.State != "" && !f.State.Valid() {
		problems = append(problems, fmt.Sprintf("state: %q is not a deployment state", f.State))
	}
	limit, err := queryInt(r, "limit")
	if err != nil {
		problems = append(problems, err.Error())
	}
	f.Limit = limit
	if next := q.Get("next"); next != "" {
		n, err := strconv.ParseUint(next, 10, 64)
		if err != nil {
			problems = append(problems, fmt.Sprintf("next: %q is not a page token", next))
		}
		f.Before = n
	}
	if len(problems) > 0 {
		return nil, badRequest(problems...)
	}
	list, next, err := a.s.State().Deployments(f)
	if err != nil {
		return nil, err
	}
	if next > 0 {
		w.Header().Set(headerNextToken, strconv.FormatUint(next, 10))
	}
	out := make([]*structs.Deployment, 0, len(list))
	for _, d := range list {
		out = append(out, d.Public())
	}
	return out, nil
}

func (a *apiBase) lookupDeployment(r *http.Request) (*structs.Deployment, error) {
	id := r.PathValue("id")
	d, err := a.s.State().Deployment(id)
	if err != nil {
		return nil, err
	}
	if d == nil {
		// Accept a unique prefix, as Nomad does for IDs.
		if len(id) >= 4 {
			list, _, err := a.s.State().Deployments(fsm.DeploymentFilter{})
			if err != nil {
				return nil, err
			}
			var found []*structs.Deployment
			for _, c := range list {
				if strings.HasPrefix(c.ID, id) {
					found = append(found, c)
				}
			}
			if len(found) == 1 {
				return found[0], nil
			}
			if len(found) > 1 {
				return nil, badRequest(fmt.Sprintf("deployment ID prefix %q matches %d deployments", id, len(found)))
			}
		}
		return nil, fmt.Errorf("%w: deployment %q", structs.ErrNotFound, id)
	}
	return d, nil
}

func (a *clusterAPI) deploymentGet(_ http.ResponseWriter, r *http.Request) (any, error) {
	d, err := a.lookupDeployment(r)
	if err != nil {
		return nil, err
	}
	return d.Public(), nil
}

func (a *clusterAPI) deploymentEvents(_ http.ResponseWriter, r *http.Request) (any, error) {
	d, err := a.lookupDeployment(r)
	if err != nil {
		return nil, err
	}
	events, err := a.s.State().Events(fsm.EventFilter{Object: d.ID})
	if err != nil {
		return nil, err
	}
	return nonNil(events), nil
}

func (a *clusterAPI) decide(r *http.Request, decision, comment string) (any, error) {
	d, err := a.lookupDeployment(r)
	if err != nil {
		return nil, err
	}
	if err := structs.CheckText("comment", comment); err != nil {
		return nil, err
	}
	req := &structs.DeploymentDecisionRequest{WriteMeta: writeMeta(r), ID: d.ID, Decision: decision, Comment: comment}
	if decision == structs.DecisionApprove {
		// The FSM decides approval { forbid_self } with what the entry
		// carries: the approver (the actor the ACL check set), the
		// deployment's recorded author, and this setting of the leader,
		// which runs this handler (a follower forwards the request).
		req.ForbidSelf = a.s.LiveConfig().Approval.ForbidSelf
	}
	if _, err := a.s.Apply(structs.DeploymentDecisionRequestType, req); err != nil {
		return nil, err
	}
	a.s.Kick(structs.Kick{Deployment: d.ID})
	d, err = a.s.State().Deployment(d.ID)
	if err != nil {
		return nil, err
	}
	return d.Public(), nil
}

func (a *clusterAPI) deploymentApprove(_ http.ResponseWriter, r *http.Request) (any, error) {
	var body structs.ApproveRequest
	if err := decode(r, &body); err != nil {
		return nil, err
	}
	return a.decide(r, structs.DecisionApprove, body.Comment)
}

func (a *clusterAPI) deploymentReject(_ http.ResponseWriter, r *http.Request) (any, error) {
	var body structs.RejectRequest
	if err := decode(r, &body); err != nil {
		return nil, err
	}
	return a.decide(r, structs.DecisionReject, body.Reason)
}

func (a *clusterAPI) pauseList(_ http.ResponseWriter, _ *http.Request) (any, error) {
	p, err := a.s.State().Pauses()
	return nonNil(p), err
}

// pauseOrResume applies a pause or a resume and wakes the jobs it
// concerns: the job the request names, every job of req.Cluster when it
// names no job, or every job when it is global.
func (a *clusterAPI) pauseOrResume(t structs.MessageType, req *structs.PauseRequest) (any, error) {
	if err := structs.CheckText("reason", req.Reason); err != nil {
		return nil, err
	}
	if _, err := a.s.Apply(t, req); err != nil {
		return nil, err
	}
	a.s.Kick(structs.Kick{Cluster: req.Cluster, Namespace: req.Namespace, JobID: req.JobID, All: req.Global})
	return a.s.State().Pauses()
}

// pauseOrResumeAll serves POST /v1/pause and /v1/resume: every job, or
// with a cluster in the body every job of that Nomad cluster, which must
// be configured.
func (a *clusterAPI) pauseOrResumeAll(r *http.Request, t structs.MessageType) (any, error) {
	if r.URL.Query().Has("cluster") {
		// The job routes take ?cluster=; here it would be ignored and the
		// request pause or resume every job of every cluster.
		return nil, badRequest(`cluster: name the cluster in the body ({"reason": "...", "cluster": "eu"}), not in the query`)
	}
	var body structs.PauseAllRequest
	if err := decode(r, &body); err != nil {
		return nil, err
	}
	if err := a.checkCluster(body.Cluster); err != nil {
		return nil, err
	}
	req := &structs.PauseRequest{WriteMeta: writeMeta(r), Global: body.Cluster == "", Cluster: body.Cluster, Reason: body.Reason}
	return a.pauseOrResume(t, req)
}

// pauseOrResumeJob serves POST /v1/job/{ns}/{id}/pause and /resume, for
// the job in the cluster its request resolved (jobCluster).
func (a *clusterAPI) pauseOrResumeJob(r *http.Request, t structs.MessageType) (any, error) {
	var body structs.ReasonRequest
	if err := decode(r, &body); err != nil {
		return nil, err
	}
	req := &structs.PauseRequest{WriteMeta: writeMeta(r), Cluster: r.URL.Query().Get("cluster"),
		Namespace: r.PathValue("ns"), JobID: r.PathValue("id"), Reason: body.Reason}
	return a.pauseOrResume(t, req)
}

func (a *clusterAPI) pauseAll(_ http.ResponseWriter, r *http.Request) (any, error) {
	return a.pauseOrResumeAll(r, structs.PauseRequestType)
}

func (a *clusterAPI) resumeAll(_ http.ResponseWriter, r *http.Request) (any, error) {
	return a.pauseOrResumeAll(r, structs.ResumeRequestType)
}

func (a *clusterAPI) jobPause(_ http.ResponseWriter, r *http.Request) (any, error) {
	return a.pauseOrResumeJob(r, structs.PauseRequestType)
}

func (a *clusterAPI) jobResume(_ http.ResponseWriter, r *http.Request) (any, error) {
	return a.pauseOrResumeJob(r, structs.ResumeRequestType)
}

func (a *clusterAPI) jobDeployNow(_ http.ResponseWriter, r *http.Request) (any, error) {
	if err := decode(r, &struct{}{}); err != nil {
		return nil, err
	}
	req := &structs.WindowLiftRequest{WriteMeta: writeMeta(r), Cluster: r.URL.Query().Get("cluster"),
		Namespace: r.PathValue("ns"), JobID: r.PathValue("id")}
	if _, err := a.s.Apply(structs.WindowLiftRequestType, req); err != nil {
		return nil, err
	}
	a.s.Kick(structs.Kick{Cluster: req.Cluster, Namespace: req.Namespace, JobID: req.JobID})
	return a.s.State().Lift(req.Cluster, req.Namespace, req.JobID)
}

func (a *clusterAPI) windowList(_ http.ResponseWriter, _ *http.Request) (any, error) {
	w, err := a.s.State().Windows()
	return nonNil(w), err
}

func (a *clusterAPI) windowGet(_ http.ResponseWriter, r *http.Request) (any, error) {
	return byPath(r, "name", "sync window", a.s.State().Window, asStored)
}

func (a *clusterAPI) windowPut(_ http.ResponseWriter, r *http.Request) (any, error) {
	var spec structs.WindowSpec
	if err := decode(r, &spec); err != nil {
		return nil, err
	}
	name := r.PathValue("name")
	var problems []string
	if spec.Name != "" && spec.Name != name {
		problems = append(problems, fmt.Sprintf("name: body names %q but the path names %q", spec.Name, name))
	}
	tz := spec.Timezone
	if tz == "" {
		tz = "UTC"
	}
	win := &structs.SyncWindow{
		Name: name, Kind: structs.WindowKind(spec.Kind), Schedule: spec.Schedule, Duration: spec.Duration,
		Timezone: tz, Namespaces: spec.Namespaces, Jobs: spec.Jobs, Clusters: spec.Clusters,
	}
	problems = append(problems, holds.Validate(win)...)
	if len(problems) > 0 {
		return nil, badRequest(problems...)
	}
	if _, err := a.s.Apply(structs.WindowUpsertRequestType, &structs.WindowUpsertRequest{WriteMeta: writeMeta(r), Window: win}); err != nil {
		return nil, err
	}
	a.s.Kick(structs.Kick{All: true})
	return a.s.State().Window(name)
}

func (a *clusterAPI) windowDelete(_ http.ResponseWriter, r *http.Request) (any, error) {
	req := &structs.WindowDeleteRequest{WriteMeta: writeMeta(r), Name: r.PathValue("name")}
	if _, err := a.s.Apply(structs.WindowDeleteRequestType, req); err != nil {
		return nil, err
	}
	a.s.Kick(structs.Kick{All: true})
	return &structs.Deleted{Deleted: req.Name}, nil
}

// eventList serves the audit log. since takes an RFC 3339 time or an event
// sequence number; with wait, the request blocks until an event newer than
// since arrives or the wait runs out (for `nops events -follow`). cluster
// keeps the events of one Nomad cluster (and those of no cluster, such as
// a global pause or a window, which concern every cluster).
func (a *clusterAPI) eventList(_ http.ResponseWriter, r *http.Request) (any, error) {
	q := r.URL.Query()
	var problems []string
	f := fsm.EventFilter{Kind: q.Get("kind"), Object: q.Get("object")}
	cluster := q.Get("cluster")
	if err := a.checkCluster(cluster); err != nil {
		problems = append(problems, err.Error())
	}
	if since := q.Get("since"); since != "" {
		if n, err := strconv.ParseUint(since, 10, 64); err == nil {
			f.AfterSeq = n
		} else if t, err := time.Parse(time.RFC3339, since); err == nil {
			f.Since = t
		} else {
			problems = append(problems, fmt.Sprintf("since: %q is neither an RFC 3339 time nor an event sequence number", since))
		}
	}
	limit, err := queryInt(r, "limit")
	if err != nil {
		problems = append(problems, err.Error())
	}
	f.Limit = limit
	var wait time.Duration
	if v := q.Get("wait"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 || d > 5*time.Minute {
			problems = append(problems, fmt.Sprintf("wait: %q must be a duration of at most 5m", v))
		}
		wait = d
	}
	if len(problems) > 0 {
		return nil, badRequest(problems...)
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	if cluster != "" {
		// The state has no index by cluster: the filter reads every
		// event after since and keeps limit of those of the cluster.
		f.Limit = 0
	}
	for {
		st := a.s.State()
		changed := st.Changed()
		events, err := st.Events(f)
		if err != nil {
			return nil, err
		}
		if cluster != "" {
			if n := len(events); n > 0 {
				f.AfterSeq, f.Since = events[n-1].Seq, time.Time{}
			}
			events = eventsOfCluster(events, cluster, limit)
		}
		if len(events) > 0 || wait == 0 {
			return nonNil(events), nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return []*structs.Event{}, nil
		}
	}
}

// eventsOfCluster keeps the first limit (0: all) events of a Nomad cluster
// and of no cluster.
func eventsOfCluster(events []*structs.Event, cluster string, limit int) []*structs.Event {
	out := events[:0]
	for _, e := range events {
		if e.Cluster == "" || e.Cluster == cluster {
			out = append(out, e)
			if limit > 0 && len(out) == limit {
				break
			}
		}
	}
	return out
}

func (a *operatorAPI) raftConfiguration(_ http.ResponseWriter, _ *http.Request) (any, error) {
	f := a.s.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("raft configuration: %w", err)
	}
	_, leaderID := a.s.Leader()
	out := &structs.RaftConfiguration{Index: f.Index(), Servers: []structs.RaftServer{}}
	for _, srv := range f.Configuration().Servers {
		node := a.s.PeerName(srv.ID, srv.Address)
		out.Servers = append(out.Servers, structs.RaftServer{
			Node: node, ID: string(srv.ID), Address: string(srv.Address), Leader: string(srv.ID) == leaderID,
			Voter: srv.Suffrage == raft.Voter, RaftProtocol: strconv.Itoa(raft.ProtocolVersionMax),
		})
	}
	return out, nil
}

func (a *operatorAPI) raftRemovePeer(_ http.ResponseWriter, r *http.Request) (any, error) {
	id := r.URL.Query().Get("id")
	if id == "" {
		return nil, badRequest("id: the peer's ID is required")
	}
	f := a.s.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, err
	}
	found := false
	for _, srv := range f.Configuration().Servers {
		if string(srv.ID) == id {
			found = true
		}
	}
	if !found {
		return nil, fmt.Errorf("%w: no raft peer with ID %q", structs.ErrNotFound, id)
	}
	if err := a.s.WaitFuture(a.s.Raft().RemoveServer(raft.ServerID(id), 0, 10*time.Second), 15*time.Second); err != nil {
		return nil, fmt.Errorf("remove peer %s: %w", id, err)
	}
	return &structs.RaftPeerRemoved{Removed: id}, nil
}

func (a *operatorAPI) raftTransfer(_ http.ResponseWriter, r *http.Request) (any, error) {
	id := r.URL.Query().Get("id")
	var f raft.Future
	if id == "" {
		f = a.s.Raft().LeadershipTransfer()
	} else {
		var addr raft.ServerAddress
		cf := a.s.Raft().GetConfiguration()
		if err := cf.Error(); err != nil {
			return nil, err
		}
		for _, srv := range cf.Configuration().Servers {
			if string(srv.ID) == id {
				addr = srv.Address
			}
		}
		if addr == "" {
			return nil, fmt.Errorf("%w: no raft peer with ID %q", structs.ErrNotFound, id)
		}
		f = a.s.Raft().LeadershipTransferToServer(raft.ServerID(id), addr)
	}
	if err := a.s.WaitFuture(f, config.LeadershipTransferTimeout); err != nil {
		return nil, fmt.Errorf("%w: leadership transfer: %w", structs.ErrConflict, err)
	}
	addr, lid := a.s.Leader()
	return &structs.LeadershipTransfer{Leader: addr, LeaderID: lid}, nil
}

func (a *operatorAPI) snapshotSave(w http.ResponseWriter, _ *http.Request) (any, error) {
	// A barrier first: the snapshot then holds every committed entry, and
	// Raft has a log entry past the last configuration change to cut it
	// at (it refuses to snapshot while the newest entry is one).
	if err := a.s.WaitFuture(a.s.Raft().Barrier(config.RaftApplyTimeout), config.RaftApplyTimeout); err != nil {
		return nil, fmt.Errorf("%w: barrier before snapshot: %w", structs.ErrNotLeader, err)
	}
	f := a.s.Raft().Snapshot()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("take snapshot: %w", err)
	}
	meta, rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("open snapshot: %w", err)
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/x-nops-snapshot")
	w.Header().Set(headerIndex, strconv.FormatUint(meta.Index, 10))
	if err := snapshot.Write(w, meta, rc); err != nil {
		a.logger.Error("write snapshot archive", "error", err)
	}
	return nil, nil
}

// snapshotRestoreSlot takes this server's one place for a snapshot
// restore, or answers 409 while another restore holds it: a restore costs
// up to its limit in memory, and several at once would cost as many times
// that.
func (a *operatorAPI) snapshotRestoreSlot() (release func(), err error) {
	if !a.restoring.TryLock() {
		return nil, &HTTPError{Code: http.StatusConflict,
			Msg: "a snapshot restore is already in progress on this server: wait for it to finish"}
	}
	return a.restoring.Unlock, nil
}

func (a *operatorAPI) snapshotRestore(_ http.ResponseWriter, r *http.Request) (any, error) {
	release, err := a.snapshotRestoreSlot()
	if err != nil {
		return nil, err
	}
	defer release()
	// The state is kept in a file under the data dir while it is checked
	// and restored, so an upload costs its size on disk, not in memory.
	maxSize := int64(orDefault(a.s.Config().SnapshotMaxSize, config.DefaultSnapshotMaxSize))
	arc, err := snapshot.ReadLimited(r.Body, snapshot.Limits{MaxSize: maxSize, TempDir: a.s.Config().DataDir})
	if err != nil {
		if he := decodeError(err); isTooLarge(he) {
			return nil, he
		}
		return nil, badRequest("snapshot archive: " + err.Error())
	}
	defer arc.Close()
	// The state is compressed: the limit bounds it decompressed too.
	if _, err := fsm.ReadOnlyLimited(arc.State(), maxSize); err != nil {
		return nil, badRequest("snapshot state: " + err.Error())
	}
	if err := a.s.Raft().Restore(arc.Meta, arc.State(), 0); err != nil {
		return nil, fmt.Errorf("restore snapshot: %w", err)
	}
	a.s.Kick(structs.Kick{All: true})
	return &structs.SnapshotRestore{RestoredIndex: arc.Meta.Index, Term: arc.Meta.Term}, nil
}

func isTooLarge(err error) bool {
	he, ok := err.(*HTTPError)
	return ok && he.Code == http.StatusRequestEntityTooLarge
}

// byPath answers the object get finds by the request's path value key, as
// view shows it, or not found, naming the object what.
func byPath[T, V any](r *http.Request, key, what string, get func(string) (*T, error), view func(*T) *V) (any, error) {
	v, err := get(r.PathValue(key))
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, fmt.Errorf("%w: %s %q", structs.ErrNotFound, what, r.PathValue(key))
	}
	return view(v), nil
}

// asStored is the view of an object the API shows as it is stored.
func asStored[T any](v *T) *T { return v }

func nonNil[T any](s []*T) []*T {
	if s == nil {
		return []*T{}
	}
	return s
}
