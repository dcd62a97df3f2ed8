package client_test

import (
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestClient_MethodsDecodeTheDeclaredAnswer walks the server's route table
// (the reconcilers' routes included) and checks that the client's method
// for each route returns the very type the route declares as its answer
// (the agent test TestRoute_EveryGETAnswerDecodesStrictly decodes a real
// server's answers into those types). A route the client has no method
// for, or whose answer it drops, is listed with the reason; a new route in
// none of the lists fails.
func TestClient_MethodsDecodeTheDeclaredAnswer(t *testing.T) {
	var c *client.Client // method values only: none is called, and the accessors only wrap c
	decodes := map[string]any{
		"GET /v1/status/leader":                      c.Status().Leader,
		"GET /v1/status/peers":                       c.Status().Peers,
		"GET /v1/agent/self":                         c.Agent().Self,
		"GET /v1/agent/members":                      c.Agent().Members,
		"GET /v1/health":                             c.Agent().Health,
		"GET /v1/deployments":                        c.Deployments().List,
		"GET /v1/deployment/{id}":                    c.Deployments().Info,
		"GET /v1/deployment/{id}/events":             c.Deployments().Events,
		"POST /v1/deployment/{id}/approve":           c.Deployments().Approve,
		"POST /v1/deployment/{id}/reject":            c.Deployments().Reject,
		"POST /v1/deployment/{id}/skip-requirements": c.Deployments().SkipRequirements,
		"GET /v1/pauses":                             c.Jobs().Pauses,
		"POST /v1/pause":                             c.Jobs().PauseAll,
		"POST /v1/resume":                            c.Jobs().ResumeAll,
		"POST /v1/job/{ns}/{id}/pause":               c.Jobs().Pause,
		"POST /v1/job/{ns}/{id}/resume":              c.Jobs().Resume,
		"POST /v1/job/{ns}/{id}/deploy-now":          c.Jobs().DeployNow,
		"GET /v1/windows":                            c.Windows().List,
		"GET /v1/window/{name}":                      c.Windows().Info,
		"PUT /v1/window/{name}":                      c.Windows().Put,
		"GET /v1/events":                             c.Events().List,
		"GET /v1/notifications":                      c.Notifications().List,
		"GET /v1/notification/{id}":                  c.Notifications().Info,
		"GET /v1/notify/targets":                     c.Notifications().Targets,
		"POST /v1/notify/{name}/test":                c.Notifications().Test,
		"GET /v1/operator/raft/configuration":        c.Operator().RaftConfiguration,
		"POST /v1/operator/raft/transfer-leadership": c.Operator().RaftTransferLeadership,
		"PUT /v1/operator/snapshot":                  c.Operator().SnapshotRestore,
		"GET /v1/operator/keyring":                   c.Operator().KeyringList,
		"POST /v1/operator/keyring/install":          c.Operator().KeyringInstall,
		"POST /v1/operator/keyring/use":              c.Operator().KeyringUse,
		"DELETE /v1/operator/keyring":                c.Operator().KeyringRemove,
		"GET /v1/operator/autopilot/configuration":   c.Operator().AutopilotGetConfig,
		"PUT /v1/operator/autopilot/configuration":   c.Operator().AutopilotSetConfig,
		"GET /v1/operator/autopilot/health":          c.Operator().AutopilotHealth,
		"POST /v1/operator/gc":                       c.Operator().GC,

		"GET /v1/jobs":                     c.Jobs().List,
		"GET /v1/job/{ns}/{id}":            c.Jobs().Info,
		"POST /v1/job/{ns}/{id}/retry":     c.Jobs().Retry,
		"POST /v1/deployment/{id}/promote": c.Deployments().Promote,
		"GET /v1/deployment/{id}/nomad":    c.Deployments().NomadHealth,
		"GET /v1/repos":                    c.Repos().List,
		"POST /v1/repo/{name}/refresh":     c.Repos().Refresh,
		"GET /v1/orphans":                  c.Jobs().Orphans,
		"GET /v1/clusters":                 c.Clusters().List,
		"POST /v1/preview":                 c.Preview,
		"GET /v1/status/cycle":             c.Status().DetectionCycle,

		"POST /v1/acl/bootstrap":           c.ACL().Bootstrap,
		"GET /v1/acl/policies":             c.ACL().Policies,
		"GET /v1/acl/policy/{name}":        c.ACL().Policy,
		"PUT /v1/acl/policy/{name}":        c.ACL().PutPolicy,
		"GET /v1/acl/roles":                c.ACL().Roles,
		"GET /v1/acl/role/{name}":          c.ACL().Role,
		"PUT /v1/acl/role/{name}":          c.ACL().PutRole,
		"GET /v1/acl/tokens":               c.ACL().Tokens,
		"POST /v1/acl/token":               c.ACL().CreateToken,
		"GET /v1/acl/token/self":           c.ACL().TokenSelf,
		"GET /v1/acl/token/{accessor_id}":  c.ACL().Token,
		"POST /v1/acl/token/{accessor_id}": c.ACL().UpdateToken,
		"GET /v1/acl/auth-methods":         c.ACL().AuthMethods,
		"GET /v1/acl/auth-method/{name}":   c.ACL().AuthMethod,
		"PUT /v1/acl/auth-method/{name}":   c.ACL().PutAuthMethod,
		"GET /v1/acl/binding-rules":        c.ACL().BindingRules,
		"POST /v1/acl/binding-rule":        c.ACL().CreateBindingRule,
		"GET /v1/acl/binding-rule/{id}":    c.ACL().BindingRule,
		"PUT /v1/acl/binding-rule/{id}":    c.ACL().UpdateBindingRule,
		"POST /v1/acl/oidc/auth-url":       c.ACL().OIDCAuthURL,
		"POST /v1/acl/oidc/complete-auth":  c.ACL().OIDCCompleteAuth,
		"POST /v1/acl/login":               c.ACL().JWTLogin,
	}
	// Deletes: the client returns only whether they succeeded.
	drops := map[string]any{
		"DELETE /v1/window/{name}":           c.Windows().Delete,
		"DELETE /v1/operator/raft/peer":      c.Operator().RaftRemovePeer,
		"DELETE /v1/acl/policy/{name}":       c.ACL().DeletePolicy,
		"DELETE /v1/acl/role/{name}":         c.ACL().DeleteRole,
		"DELETE /v1/acl/token/{accessor_id}": c.ACL().DeleteToken,
		"DELETE /v1/acl/auth-method/{name}":  c.ACL().DeleteAuthMethod,
		"DELETE /v1/acl/binding-rule/{id}":   c.ACL().DeleteBindingRule,
	}
	// Answers that are not JSON: the client hands over the stream.
	streams := map[string]any{
		"GET /v1/agent/monitor":      c.Agent().Monitor,
		"GET /v1/agent/debug/{item}": c.Agent().DebugItem,
		"GET /v1/operator/snapshot":  c.Operator().SnapshotSave,
		"GET /v1/events/stream":      c.Events().Stream,
	}
	unused := map[string]string{
		"GET /v1/status/node":  "servers ask it of each other before making a member a voter",
		"GET /v1/status/raft":  "the leader's autopilot reads it from every server",
		"POST /v1/webhook/git": "git hosts call it",
		"GET /debug/pprof/":    "go tool pprof reads it",
	}

	s := nopstest.StartDev(t, nopstest.WithReconciler(fakeReconciler()))
	errType := reflect.TypeFor[error]()
	readCloser := reflect.TypeFor[io.ReadCloser]()
	seen := map[string]bool{}
	for _, rt := range s.RouteTable() {
		if rt.Answer == nil && rt.NotJSON == "" {
			t.Errorf("route %s declares no answer", rt.Pattern)
			continue
		}
		if rt.Answer == nil && isDashboard(rt.Pattern) {
			continue
		}
		seen[rt.Pattern] = true
		if m, ok := decodes[rt.Pattern]; ok {
			if rt.Answer == nil {
				t.Errorf("the client decodes %s as JSON, but the route answers %s", rt.Pattern, rt.NotJSON)
				continue
			}
			if got := reflect.TypeOf(m).Out(0); got != rt.Answer {
				t.Errorf("the client's method for %s returns %s, the route answers %s", rt.Pattern, got, rt.Answer)
			}
			continue
		}
		if m, ok := drops[rt.Pattern]; ok {
			if ft := reflect.TypeOf(m); ft.NumOut() != 1 || ft.Out(0) != errType {
				t.Errorf("the client's method for %s is listed as dropping the answer, but returns %s", rt.Pattern, ft)
			}
			continue
		}
		if m, ok := streams[rt.Pattern]; ok {
			if rt.Answer != nil {
				t.Errorf("the client streams %s, but the route answers JSON %s", rt.Pattern, rt.Answer)
			}
			if ft := reflect.TypeOf(m); ft.Out(0) != readCloser && ft.Out(0) != errType {
				t.Errorf("the client's method for %s returns %s, not a stream", rt.Pattern, ft)
			}
			continue
		}
		if _, ok := unused[rt.Pattern]; ok {
			continue
		}
		t.Errorf("route %s has no client method and is not listed as unused by the client", rt.Pattern)
	}
	for _, list := range []map[string]any{decodes, drops, streams} {
		for p := range list {
			if !seen[p] {
				t.Errorf("the client lists %s, which the server does not serve", p)
			}
		}
	}
	for p := range unused {
		if !seen[p] {
			t.Errorf("the client lists %s, which the server does not serve", p)
		}
	}
}

func isDashboard(pattern string) bool {
	_, path, _ := strings.Cut(pattern, " ")
	return strings.HasPrefix(path, "/ui")
}
