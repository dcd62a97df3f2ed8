package agenthttp

import (
	"reflect"

	"github.com/nops-dev/nops/structs"
)

// routeAnswer is what a route answers on success: the type its JSON body
// decodes into, or, for a route whose answer is not JSON, what it is
// instead (notJSON).
type routeAnswer struct {
	typ     reflect.Type
	notJSON string
}

func answer[T any]() routeAnswer { return routeAnswer{typ: reflect.TypeFor[T]()} }

func notJSON(what string) routeAnswer { return routeAnswer{notJSON: what} }

// routeAnswers declares, for every pattern of the route table but the
// dashboard's (its pages and static files, never JSON), its answer.
// The types are those of package structs, which rpc/client decodes into
// too; a test walks the route table and fails on a route missing here, and
// decodes the answer of every GET route of a real server strictly into the
// type declared here.
func routeAnswers() map[string]routeAnswer {
	deployment, deployments := answer[*structs.Deployment](), answer[[]*structs.Deployment]()
	pauses := answer[[]*structs.Pause]()
	window := answer[*structs.SyncWindow]()
	deleted := answer[*structs.Deleted]()
	keyring := answer[*structs.KeyringResponse]()
	autopilotConf := answer[*structs.AutopilotConfiguration]()
	token := answer[*structs.ACLTokenView]()
	policy, role := answer[*structs.ACLPolicy](), answer[*structs.ACLRole]()
	method, rule := answer[*structs.ACLAuthMethod](), answer[*structs.ACLBindingRule]()
	return map[string]routeAnswer{
		"GET /v1/status/leader": answer[string](),
		"GET /v1/status/peers":  answer[[]string](),
		"GET /v1/status/node":   answer[*structs.NodeStatus](),
		"GET /v1/status/raft":   answer[*structs.RaftStats](),
		"GET /v1/agent/self":    answer[*structs.AgentSelf](),
		"GET /v1/agent/members": answer[[]structs.Member](),
		"GET /v1/health":        answer[*structs.Health](),

		"GET /v1/deployments":               deployments,
		"GET /v1/deployment/{id}":           deployment,
		"GET /v1/deployment/{id}/events":    answer[[]*structs.Event](),
		"POST /v1/deployment/{id}/approve":  deployment,
		"POST /v1/deployment/{id}/reject":   deployment,
		"GET /v1/pauses":                    pauses,
		"POST /v1/pause":                    pauses,
		"POST /v1/resume":                   pauses,
		"POST /v1/job/{ns}/{id}/pause":      pauses,
		"POST /v1/job/{ns}/{id}/resume":     pauses,
		"POST /v1/job/{ns}/{id}/deploy-now": answer[*structs.WindowLift](),
		"GET /v1/windows":                   answer[[]*structs.SyncWindow](),
		"GET /v1/window/{name}":             window,
		"PUT /v1/window/{name}":             window,
		"DELETE /v1/window/{name}":          deleted,
		"GET /v1/events":                    answer[[]*structs.Event](),

		"GET /v1/notifications":         answer[[]*structs.Notification](),
		"GET /v1/notification/{id}":     answer[*structs.Notification](),
		"GET /v1/notify/targets":        answer[[]*structs.NotifyTarget](),
		"POST /v1/notify/{name}/test":   answer[*structs.NotifyTestResult](),
		"GET /v1/events/stream":         notJSON("a stream of server-sent events, each an Event"),
		"GET /v1/agent/monitor":         notJSON("a stream of log lines"),
		"GET /v1/agent/debug/{item}":    notJSON("a debug bundle item: JSON, Prometheus text or a Go profile"),
		"GET /debug/pprof/":             notJSON("a Go pprof profile or index"),
		"GET /v1/operator/snapshot":     notJSON("a snapshot archive"),
		"PUT /v1/operator/snapshot":     answer[*structs.SnapshotRestore](),
		"POST /v1/operator/gc":          answer[*structs.GCResult](),
		"DELETE /v1/operator/raft/peer": answer[*structs.RaftPeerRemoved](),

		"GET /v1/operator/raft/configuration":        answer[*structs.RaftConfiguration](),
		"POST /v1/operator/raft/transfer-leadership": answer[*structs.LeadershipTransfer](),
		"GET /v1/operator/keyring":                   keyring,
		"POST /v1/operator/keyring/install":          keyring,
		"POST /v1/operator/keyring/use":              keyring,
		"DELETE /v1/operator/keyring":                keyring,
		"GET /v1/operator/autopilot/configuration":   autopilotConf,
		"PUT /v1/operator/autopilot/configuration":   autopilotConf,
		"GET /v1/operator/autopilot/health":          answer[*structs.AutopilotHealth](),

		"GET /v1/jobs":                     answer[[]*structs.JobSummary](),
		"GET /v1/job/{ns}/{id}":            answer[*structs.JobDetail](),
		"POST /v1/job/{ns}/{id}/retry":     answer[*structs.Block](),
		"POST /v1/deployment/{id}/promote": answer[*structs.PromoteResult](),
		"GET /v1/deployment/{id}/nomad":    answer[*structs.NomadHealth](),
		"GET /v1/repos":                    answer[[]*structs.RepoStatus](),
		"POST /v1/repo/{name}/refresh":     answer[*structs.RepoStatus](),
		"GET /v1/orphans":                  answer[[]*structs.JobStatus](),
		"GET /v1/clusters":                 answer[[]*structs.ClusterStatus](),
		"POST /v1/preview":                 answer[*structs.Preview](),
		"GET /v1/status/cycle":             answer[*structs.DetectionCycle](),
		"POST /v1/webhook/git":             answer[*structs.WebhookResult](),

		"POST /v1/acl/bootstrap":             token,
		"GET /v1/acl/policies":               answer[[]*structs.ACLPolicy](),
		"GET /v1/acl/policy/{name}":          policy,
		"PUT /v1/acl/policy/{name}":          policy,
		"DELETE /v1/acl/policy/{name}":       deleted,
		"GET /v1/acl/roles":                  answer[[]*structs.ACLRole](),
		"GET /v1/acl/role/{name}":            role,
		"PUT /v1/acl/role/{name}":            role,
		"DELETE /v1/acl/role/{name}":         deleted,
		"GET /v1/acl/tokens":                 answer[[]*structs.ACLTokenView](),
		"POST /v1/acl/token":                 token,
		"GET /v1/acl/token/self":             token,
		"GET /v1/acl/token/{accessor_id}":    token,
		"POST /v1/acl/token/{accessor_id}":   token,
		"DELETE /v1/acl/token/{accessor_id}": deleted,
		"GET /v1/acl/auth-methods":           answer[[]*structs.ACLAuthMethod](),
		"GET /v1/acl/auth-method/{name}":     method,
		"PUT /v1/acl/auth-method/{name}":     method,
		"DELETE /v1/acl/auth-method/{name}":  deleted,
		"GET /v1/acl/binding-rules":          answer[[]*structs.ACLBindingRule](),
		"POST /v1/acl/binding-rule":          rule,
		"GET /v1/acl/binding-rule/{id}":      rule,
		"PUT /v1/acl/binding-rule/{id}":      rule,
		"DELETE /v1/acl/binding-rule/{id}":   deleted,
		"POST /v1/acl/oidc/auth-url":         answer[*structs.ACLOIDCAuthURLResponse](),
		"POST /v1/acl/oidc/complete-auth":    token,
		"POST /v1/acl/login":                 token,
	}
}
