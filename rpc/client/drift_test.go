package client_test

import (
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/nops-dev/nops/rpc/client"
)

// TestClient_MethodsDecodeTheDeclaredAnswer walks the server's route table
// (the reconcilers' routes included) and checks that the client's method
// for each route returns the very type the route declares as its answer
// (the agent test TestRoute_EveryGETAnswerDecodesStrictly decodes a real
// server's answers into those types). A route the client has no method
// for, or whose answer it drops, is listed with the reason; a new route in
// none of the lists fails.
func TestClient_MethodsDecodeTheDeclaredAnswer(t *testing.T) {
	var c *client.Client // method values only: none is called
	decodes := map[string]any{
		"GET /v1/status/leader":                      c.Leader,
		"GET /v1/status/peers":                       c.Peers,
		"GET /v1/agent/self":                         c.Self,
		"GET /v1/agent/members":                      c.Members,
		"GET /v1/health":                             c.Health,
		"GET /v1/deployments":                        c.Deployments,
		"GET /v1/deployment/{id}":                    c.Deployment,
		"GET /v1/deployment/{id}/events":             c.DeploymentEvents,
		"POST /v1/deployment/{id}/approve":           c.Approve,
		"POST /v1/deployment/{id}/reject":            c.Reject,
		"GET /v1/pauses":                             c.Pauses,
		"POST /v1/pause":                             c.PauseAll,
		"POST /v1/resume":                            c.ResumeAll,
		"POST /v1/job/{ns}/{id}/pause":               c.PauseJob,
		"POST /v1/job/{ns}/{id}/resume":              c.ResumeJob,
		"POST /v1/job/{ns}/{id}/deploy-now":          c.DeployNow,
		"GET /v1/windows":                            c.Windows,
		"GET /v1/window/{name}":                      c.Window,
		"PUT /v1/window/{name}":                      c.PutWindow,
		"GET /v1/events":                             c.Events,
		"GET /v1/notifications":                      c.Notifications,
		"GET /v1/notification/{id}":                  c.Notification,
		"GET /v1/notify/targets":                     c.NotifyTargets,
		"POST /v1/notify/{name}/test":                c.NotifyTest,
		"GET /v1/operator/raft/configuration":        c.RaftConfiguration,
		"POST /v1/operator/raft/transfer-leadership": c.RaftTransferLeadership,
		"PUT /v1/operator/snapshot":                  c.SnapshotRestore,
		"GET /v1/operator/keyring":                   c.KeyringList,
		"POST /v1/operator/keyring/install":          c.KeyringInstall,
		"POST /v1/operator/keyring/use":              c.KeyringUse,
		"DELETE /v1/operator/keyring":                c.KeyringRemove,
		"GET /v1/operator/autopilot/configuration":   c.AutopilotGetConfig,
		"PUT /v1/operator/autopilot/configuration":   c.AutopilotSetConfig,
		"GET /v1/operator/autopilot/health":          c.AutopilotHealth,
		"POST /v1/operator/gc":                       c.OperatorGC,

		"GET /v1/jobs":                     c.Jobs,
		"GET /v1/job/{ns}/{id}":            c.Job,
		"POST /v1/job/{ns}/{id}/retry":     c.RetryJob,
		"POST /v1/deployment/{id}/promote": c.Promote,
		"GET /v1/deployment/{id}/nomad":    c.NomadHealth,
		"GET /v1/repos":                    c.Repos,
		"POST /v1/repo/{name}/refresh":     c.RefreshRepo,
		"GET /v1/orphans":                  c.Orphans,
		"GET /v1/status/cycle":             c.DetectionCycle,

		"POST /v1/acl/bootstrap":           c.ACLBootstrap,
		"GET /v1/acl/policies":             c.ACLPolicies,
		"GET /v1/acl/policy/{name}":        c.ACLPolicy,
		"PUT /v1/acl/policy/{name}":        c.PutACLPolicy,
		"GET /v1/acl/roles":                c.ACLRoles,
		"GET /v1/acl/role/{name}":          c.ACLRole,
		"PUT /v1/acl/role/{name}":          c.PutACLRole,
		"GET /v1/acl/tokens":               c.ACLTokens,
		"POST /v1/acl/token":               c.CreateACLToken,
		"GET /v1/acl/token/self":           c.ACLTokenSelf,
		"GET /v1/acl/token/{accessor_id}":  c.ACLToken,
		"POST /v1/acl/token/{accessor_id}": c.UpdateACLToken,
		"GET /v1/acl/auth-methods":         c.ACLAuthMethods,
		"GET /v1/acl/auth-method/{name}":   c.ACLAuthMethod,
		"PUT /v1/acl/auth-method/{name}":   c.PutACLAuthMethod,
		"GET /v1/acl/binding-rules":        c.ACLBindingRules,
		"POST /v1/acl/binding-rule":        c.CreateACLBindingRule,
		"GET /v1/acl/binding-rule/{id}":    c.ACLBindingRule,
		"PUT /v1/acl/binding-rule/{id}":    c.UpdateACLBindingRule,
		"POST /v1/acl/oidc/auth-url":       c.OIDCAuthURL,
		"POST /v1/acl/oidc/complete-auth":  c.OIDCCompleteAuth,
		"POST /v1/acl/login":               c.JWTLogin,
	}
	// Deletes: the client returns only whether they succeeded.
	drops := map[string]any{
		"DELETE /v1/window/{name}":           c.DeleteWindow,
		"DELETE /v1/operator/raft/peer":      c.RaftRemovePeer,
		"DELETE /v1/acl/policy/{name}":       c.DeleteACLPolicy,
		"DELETE /v1/acl/role/{name}":         c.DeleteACLRole,
		"DELETE /v1/acl/token/{accessor_id}": c.DeleteACLToken,
		"DELETE /v1/acl/auth-method/{name}":  c.DeleteACLAuthMethod,
		"DELETE /v1/acl/binding-rule/{id}":   c.DeleteACLBindingRule,
	}
	// Answers that are not JSON: the client hands over the stream.
	streams := map[string]any{
		"GET /v1/agent/monitor":      c.Monitor,
		"GET /v1/agent/debug/{item}": c.DebugItem,
		"GET /v1/operator/snapshot":  c.SnapshotSave,
		"GET /v1/events/stream":      c.EventStream,
	}
	unused := map[string]string{
		"GET /v1/status/node":  "servers ask it of each other before making a member a voter",
		"GET /v1/status/raft":  "the leader's autopilot reads it from every server",
		"POST /v1/webhook/git": "git hosts call it",
		"GET /debug/pprof/":    "go tool pprof reads it",
	}

	s := startWithReconciler(t, fakeReconciler())
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
