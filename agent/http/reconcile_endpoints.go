package agenthttp

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/nops-dev/nops/agent/acl"
	"github.com/nops-dev/nops/structs"
)

// Reconciler is what the API asks of the leader's reconcilers
// (reconcile.Manager): typed answers, and errors that wrap the structs
// sentinels. The agent owns the HTTP side of these routes (path and query
// decoding, request limits, tokens, status codes); the reconciler never
// sees a request. Writes (Retry, PromoteDeployment, Refresh, Push) are
// called on the leader only.
type Reconciler interface {
	// Jobs lists the managed jobs, of one cluster, one namespace and one
	// sync state when they are not empty.
	Jobs(cluster, namespace string, sync structs.SyncState) ([]*structs.JobSummary, error)
	// Job returns one managed job of a cluster ("" for the one cluster
	// whose jobs hold that namespace and ID: structs.ErrInvalid naming the
	// clusters when several do); structs.ErrNotFound when it is not
	// managed.
	Job(cluster, namespace, jobID string) (*structs.JobDetail, error)
	// JobCluster resolves the cluster of a job a request names, as Job
	// does.
	JobCluster(cluster, namespace, jobID string) (string, error)
	// Retry lifts the block of a job on behalf of actor.
	Retry(ctx context.Context, cluster, namespace, jobID, actor string) (*structs.Block, error)
	// PromoteDeployment promotes the canaries of a deployment.
	PromoteDeployment(ctx context.Context, id, actor string) (*structs.PromoteResult, error)
	// NomadHealth reads the health of a deployment from Nomad.
	NomadHealth(ctx context.Context, id string) (*structs.NomadHealth, error)
	// Repos lists the watched repositories.
	Repos() ([]*structs.RepoStatus, error)
	// Refresh fetches a watched repository now.
	Refresh(ctx context.Context, name string) (*structs.RepoStatus, error)
	// Orphans lists the jobs git no longer declares, of one cluster when
	// it is not empty.
	Orphans(cluster string) ([]*structs.JobStatus, error)
	// Clusters returns what the leader sees of each Nomad cluster (SPEC
	// section 16); called on the leader only.
	Clusters() []*structs.ClusterStatus
	// Cycle returns the last detection cycle; structs.ErrNotFound before
	// the first.
	Cycle() (*structs.DetectionCycle, error)
	// Push takes a git push whose signature the agent verified.
	Push(ctx context.Context, p *structs.Push) (*structs.WebhookResult, error)
	// Preview answers what Nops would do with a repository at a ref,
	// writing nothing (SPEC section 19); called on the leader only.
	Preview(ctx context.Context, req *structs.PreviewRequest) (*structs.Preview, error)
}

// reconcileRoutes adds the routes the reconcilers answer, when the server
// runs them: without a reconciler they do not exist (404, no such
// endpoint), as on a server that predates them.
func (a *httpAPI) reconcileRoutes(route func(pattern, kind string, rule routeRule, fn handlerFunc)) {
	rec := a.s.Reconciler()
	if rec == nil {
		return
	}
	route("GET /v1/jobs", kindRead, filtered(acl.Read), func(_ http.ResponseWriter, r *http.Request) (any, error) {
		q := r.URL.Query()
		cluster, err := a.clusterFilter(r)
		if err != nil {
			return nil, err
		}
		return rec.Jobs(cluster, q.Get("namespace"), structs.SyncState(q.Get("sync")))
	})
	route("GET /v1/job/{ns}/{id}", kindRead, onJob(acl.Read), func(_ http.ResponseWriter, r *http.Request) (any, error) {
		return rec.Job(r.URL.Query().Get("cluster"), r.PathValue("ns"), r.PathValue("id"))
	})
	route("POST /v1/job/{ns}/{id}/retry", kindWrite, onJob(acl.Deploy), func(_ http.ResponseWriter, r *http.Request) (any, error) {
		return rec.Retry(r.Context(), r.URL.Query().Get("cluster"), r.PathValue("ns"), r.PathValue("id"), writeMeta(r).Actor)
	})
	route("POST /v1/deployment/{id}/promote", kindWrite, onDeployment(acl.Deploy), func(_ http.ResponseWriter, r *http.Request) (any, error) {
		return rec.PromoteDeployment(r.Context(), r.PathValue("id"), writeMeta(r).Actor)
	})
	route("GET /v1/deployment/{id}/nomad", kindRead, onDeployment(acl.Read), func(_ http.ResponseWriter, r *http.Request) (any, error) {
		return rec.NomadHealth(r.Context(), r.PathValue("id"))
	})
	route("GET /v1/repos", kindRead, onCluster(acl.Read), func(_ http.ResponseWriter, _ *http.Request) (any, error) {
		return rec.Repos()
	})
	route("POST /v1/repo/{name}/refresh", kindWrite, onCluster(acl.Deploy), func(_ http.ResponseWriter, r *http.Request) (any, error) {
		return rec.Refresh(r.Context(), r.PathValue("name"))
	})
	route("GET /v1/orphans", kindRead, filtered(acl.Read), func(_ http.ResponseWriter, r *http.Request) (any, error) {
		cluster, err := a.clusterFilter(r)
		if err != nil {
			return nil, err
		}
		return rec.Orphans(cluster)
	})
	// What the leader's loops see of each Nomad cluster: a follower
	// forwards it.
	route("GET /v1/clusters", kindLeaderRead, onCluster(acl.Read), func(_ http.ResponseWriter, _ *http.Request) (any, error) {
		return rec.Clusters(), nil
	})
	// A preview reads the leader's git clones and plans through Nomad:
	// a follower forwards it. Its jobs are those the token may read.
	route("POST /v1/preview", kindLeaderRead, filtered(acl.Read), func(_ http.ResponseWriter, r *http.Request) (any, error) {
		var req structs.PreviewRequest
		if err := decode(r, &req); err != nil {
			return nil, err
		}
		p, err := rec.Preview(r.Context(), &req)
		if err != nil {
			return nil, err
		}
		return readablePreview(p, requestIdentity(r)), nil
	})
	route("GET /v1/status/cycle", kindRead, public(), func(_ http.ResponseWriter, _ *http.Request) (any, error) {
		return rec.Cycle()
	})
	// The webhook proves its sender with its signature, not a token.
	route("POST /v1/webhook/git", kindWrite, public(), func(_ http.ResponseWriter, r *http.Request) (any, error) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, decodeError(err)
		}
		push, note, err := verifyPush(r.Header, body, a.s.WebhookSecret())
		if err != nil {
			if errors.Is(err, structs.ErrUnauthorized) {
				a.logger.Warn("webhook refused", "remote", r.RemoteAddr, "error", err)
			}
			return nil, err
		}
		if push == nil {
			a.logger.Debug("webhook delivery is no push of a branch", "remote", r.RemoteAddr, "note", note)
			return &structs.WebhookResult{Matched: []string{}, Message: note}, nil
		}
		return rec.Push(r.Context(), push)
	})
}

// readablePreview leaves out of a preview the jobs id may not read, and
// the files that are not valid jobs unless it may read the cluster (as
// the repositories' parse errors need), and says whether what is left
// changes anything.
func readablePreview(p *structs.Preview, id *identity) *structs.Preview {
	if !canRead(id, "", "", "") {
		p.Errors = nil
	}
	keep := func(jobs []*structs.PreviewJob) []*structs.PreviewJob {
		out := make([]*structs.PreviewJob, 0, len(jobs))
		for _, j := range jobs {
			if canRead(id, j.Cluster, j.Namespace, j.JobID) {
				out = append(out, j)
			}
		}
		return out
	}
	p.Jobs, p.Removed = keep(p.Jobs), keep(p.Removed)
	p.Changes = len(p.Jobs) > 0 || len(p.Removed) > 0 || len(p.Errors) > 0
	return p
}
