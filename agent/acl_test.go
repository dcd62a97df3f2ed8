package agent_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	agenthttp "github.com/nops-dev/nops/agent/http"
	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// aclCall sends one request with a token (none when empty) and a forged
// X-Nops-Actor, which must change nothing.
func aclCall(t testing.TB, s *nopstest.Server, token, method, path string, body any) answer {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, s.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	nopstest.SetContentType(req)
	req.Header.Set("X-Nops-Actor", "mallory")
	if token != "" {
		req.Header.Set("X-Nops-Token", token)
	}
	hc := &http.Client{Timeout: 60 * time.Second}
	if strings.HasPrefix(path, "/ui/") {
		// A dashboard action answers with a redirect to a page, which
		// may need another capability: the action's answer is the one.
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return answer{code: resp.StatusCode, body: raw, header: resp.Header}
}

// aclDigest renders what a refused request must not change: every
// object a person can change, ACL objects included. What the leader's
// loops change on their own (deployment states, job statuses, the
// events they record as "nops") is left out: an approved deployment goes
// on running while the walk goes on.
func aclDigest(t testing.TB, st *fsm.StateStore) string {
	t.Helper()
	d := &digest{t: t}
	deps, _, err := st.Deployments(fsm.DeploymentFilter{})
	for _, dep := range deps {
		d.add("decisions of "+dep.ID, dep.Decisions, err)
	}
	events, err := st.Events(fsm.EventFilter{})
	var personal []*structs.Event
	for _, e := range events {
		if e.Actor != "nops" {
			personal = append(personal, e)
		}
	}
	d.add("events", personal, err)
	d.addHolds(st)
	blocks, err := st.Blocks()
	for _, bl := range blocks {
		d.add("retry of "+bl.Key(), []any{bl.Retried, bl.RetriedBy}, err)
	}
	pols, err := st.ACL().Policies()
	d.add("policies", pols, err)
	roles, err := st.ACL().Roles()
	d.add("roles", roles, err)
	toks, err := st.ACL().Tokens()
	d.add("tokens", toks, err)
	ms, err := st.ACL().AuthMethods()
	d.add("methods", ms, err)
	rules, err := st.ACL().BindingRules()
	d.add("rules", rules, err)
	return d.b.String()
}

// syncAll waits until every running server has applied what the leader
// has.
func syncAll(t testing.TB, c *nopstest.Cluster) {
	t.Helper()
	leader := c.WaitForLeader(30 * time.Second)
	want := leader.State().LatestIndex()
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		for _, s := range c.Servers() {
			if got := s.State().LatestIndex(); got < want {
				return false, fmt.Errorf("server %s at index %d, leader at %d", s.NodeID(), got, want)
			}
		}
		return true, nil
	})
}

type aclFixture struct {
	t        *testing.T
	c        *nopstest.Cluster
	follower *nopstest.Server
	mgmt     string
	tokens   map[string]string // "cluster:read" → secret
	names    map[string]string // secret → token name
}

// token returns a client token that holds exactly one capability on one
// scope: on the cluster, or on job default/web.
func (f *aclFixture) token(scope, capability string) string {
	key := scope + ":" + capability
	if s, ok := f.tokens[key]; ok {
		return s
	}
	rules := fmt.Sprintf("cluster {\n capabilities = [%q]\n}", capability)
	if scope != "cluster" {
		rules = fmt.Sprintf("namespace \"default\" {\n job \"web\" {\n capabilities = [%q]\n }\n}", capability)
	}
	name := strings.ReplaceAll(key, ":", "-")
	a := aclCall(f.t, f.follower, f.mgmt, "PUT", "/v1/acl/policy/"+name, map[string]string{"rules": rules})
	a.ok(f.t, "policy "+name, nil)
	var tok structs.ACLTokenView
	aclCall(f.t, f.follower, f.mgmt, "POST", "/v1/acl/token", map[string]any{"name": "tok-" + name, "policies": []string{name}}).ok(f.t, "token "+name, &tok)
	f.tokens[key] = tok.SecretID
	f.names[tok.SecretID] = tok.Name
	syncAll(f.t, f.c)
	return tok.SecretID
}

// TestACL_EveryRouteOnACluster walks the whole route table of a 3-server
// cluster with ACLs on, through a follower: every route declares a rule;
// every non-public route answers 401 without a token and 403 to a token
// without its capability, changing nothing on any server, and does not
// answer 401 or 403 to a token with it. Then: the actor of an approval is
// the token's name whatever X-Nops-Actor says; bootstrap works once and
// again after a reset; an expired token is refused and collected; ACL
// objects survive the kill of the leader.
func TestACL_EveryRouteOnACluster(t *testing.T) {
	nomad := testutil.StartNomad(t)
	repo := testutil.NewGitRepoWith(t, "web", map[string]string{
		"jobs/web.nomad.hcl": testutil.ServiceJobHCL("web", testutil.WithManaged("approval")),
	})
	c := nopstest.StartCluster(t, 3, nopstest.WithNomad(nomad.Addr), nopstest.WithRepo("ops", repo.URL(), "main", "jobs"),
		nopstest.WithConfig(func(cfg *config.Config) { cfg.ACL.Enabled = true; cfg.DriftInterval = time.Hour }))
	leader := c.WaitForLeader(30 * time.Second)
	follower := c.Followers()[0]

	// Bootstrap through a follower (forwarded to the leader): once.
	var boot structs.ACLTokenView
	aclCall(t, follower, "", "POST", "/v1/acl/bootstrap", nil).ok(t, "bootstrap", &boot)
	if boot.SecretID == "" || boot.Type != structs.ACLManagementToken {
		t.Fatalf("bootstrap answer %+v", boot)
	}
	again := aclCall(t, follower, "", "POST", "/v1/acl/bootstrap", nil)
	if again.code != http.StatusConflict || !strings.Contains(again.errorMessage(), "reset index") {
		t.Fatalf("second bootstrap: %d %s; want 409 naming the reset index", again.code, again.body)
	}
	f := &aclFixture{t: t, c: c, follower: follower, mgmt: boot.SecretID, tokens: map[string]string{}, names: map[string]string{}}

	// The deployment detection creates for web waits for approval.
	var dep *structs.Deployment
	testutil.WaitForResult(t, 60*time.Second, func() (bool, error) {
		deps, _, err := follower.State().Deployments(fsm.DeploymentFilter{JobID: "web", State: structs.StatePendingApproval})
		if err != nil || len(deps) == 0 {
			return false, fmt.Errorf("no pending deployment of web yet (%v)", err)
		}
		dep = deps[0]
		return true, nil
	})

	// Objects the routes act on.
	// The windows are closed throughout: an open deny window would hold
	// web and supersede the deployment the walk approves.
	aclCall(t, follower, f.mgmt, "PUT", "/v1/window/w1", map[string]string{"kind": "deny", "schedule": testutil.ClosedSchedule(), "duration": "1h"}).ok(t, "window", nil)
	aclCall(t, follower, f.mgmt, "PUT", "/v1/acl/policy/scratch", map[string]string{"rules": "namespace \"x\" {\n capabilities = [\"read\"]\n}"}).ok(t, "policy", nil)
	aclCall(t, follower, f.mgmt, "PUT", "/v1/acl/role/scratch-role", map[string]any{"policies": []string{"scratch"}}).ok(t, "role", nil)
	var victim structs.ACLTokenView
	aclCall(t, follower, f.mgmt, "POST", "/v1/acl/token", map[string]any{"name": "victim", "policies": []string{"scratch"}}).ok(t, "victim token", &victim)
	jwtMethod := map[string]any{"type": "jwt", "config": map[string]any{
		"jwks_url": "https://idp.invalid/keys", "bound_audiences": []string{"nops"}}}
	aclCall(t, follower, f.mgmt, "PUT", "/v1/acl/auth-method/sso", jwtMethod).ok(t, "auth method", nil)
	aclCall(t, follower, f.mgmt, "PUT", "/v1/acl/auth-method/scratch-method", jwtMethod).ok(t, "auth method", nil)
	var rule structs.ACLBindingRule
	ruleBody := map[string]any{"auth_method": "sso", "bind_type": "policy", "bind_name": "elsewhere"}
	aclCall(t, follower, f.mgmt, "POST", "/v1/acl/binding-rule", ruleBody).ok(t, "binding rule", &rule)

	// A token with a capability on another namespace only: it lacks every
	// capability a route needs here.
	aclCall(t, follower, f.mgmt, "PUT", "/v1/acl/policy/elsewhere", map[string]string{"rules": "namespace \"other\" {\n capabilities = [\"pause\"]\n}"}).ok(t, "policy", nil)
	var wrong structs.ACLTokenView
	aclCall(t, follower, f.mgmt, "POST", "/v1/acl/token", map[string]any{"name": "wrong", "policies": []string{"elsewhere"}}).ok(t, "wrong token", &wrong)
	syncAll(t, c)

	path := func(pattern string) string {
		p := pattern[strings.Index(pattern, " ")+1:]
		r := strings.NewReplacer(
			"/v1/deployment/{id}", "/v1/deployment/"+dep.ID,
			"/v1/job/{ns}/{id}", "/v1/job/default/web",
			"/v1/window/{name}", "/v1/window/w1",
			"/v1/repo/{name}", "/v1/repo/ops",
			"/v1/acl/policy/{name}", "/v1/acl/policy/scratch",
			"/v1/acl/role/{name}", "/v1/acl/role/scratch-role",
			"/v1/acl/token/{accessor_id}", "/v1/acl/token/"+victim.AccessorID,
			"/v1/acl/auth-method/{name}", "/v1/acl/auth-method/scratch-method",
			"/v1/acl/binding-rule/{id}", "/v1/acl/binding-rule/"+rule.ID,
			"/ui/{$}", "/ui/",
			"/ui/deployment/{id}", "/ui/deployment/"+dep.ID,
			"/ui/job/{ns}/{id}", "/ui/job/default/web",
			"/ui/window/{name}", "/ui/window/w1",
			"/ui/repo/{name}", "/ui/repo/ops",
		)
		p = r.Replace(p)
		if strings.HasPrefix(p, "/v1/operator/raft/") && !strings.HasSuffix(p, "configuration") {
			p += "?id=no-such-peer"
		}
		return p
	}
	bodies := map[string]any{
		"POST /v1/deployment/{id}/approve":           map[string]string{"comment": "ship it"},
		"POST /v1/deployment/{id}/reject":            map[string]string{"reason": "no"},
		"POST /v1/deployment/{id}/skip-requirements": map[string]string{"reason": "staging is down"},
		"POST /v1/pause":                             map[string]string{"reason": "freeze"},
		"POST /v1/resume":                            map[string]string{"reason": "thaw"},
		"POST /v1/job/{ns}/{id}/pause":               map[string]string{"reason": "hold"},
		"POST /v1/job/{ns}/{id}/resume":              map[string]string{"reason": "go"},
		"PUT /v1/window/{name}":                      map[string]string{"kind": "deny", "schedule": testutil.ClosedSchedule(), "duration": "2h"},
		"PUT /v1/operator/snapshot":                  "not a snapshot",
		"PUT /v1/acl/policy/{name}":                  map[string]string{"rules": "namespace \"y\" {\n capabilities = [\"read\"]\n}"},
		"PUT /v1/acl/role/{name}":                    map[string]any{"policies": []string{"elsewhere"}},
		"POST /v1/acl/token":                         map[string]any{"policies": []string{"elsewhere"}},
		"POST /v1/acl/token/{accessor_id}":           map[string]any{"name": "victim-2", "policies": []string{"elsewhere"}},
		"PUT /v1/acl/auth-method/{name}":             jwtMethod,
		"POST /v1/acl/binding-rule":                  ruleBody,
		"PUT /v1/acl/binding-rule/{id}":              ruleBody,
		"POST /v1/job/{ns}/{id}/deploy-now":          map[string]string{},
		"POST /v1/acl/oidc/auth-url":                 map[string]string{},
		"POST /v1/acl/oidc/complete-auth":            map[string]string{},
		"POST /v1/acl/login":                         map[string]string{},
		"POST /v1/acl/bootstrap":                     nil,
		"POST /v1/deployment/{id}/promote":           nil,
		"POST /v1/job/{ns}/{id}/retry":               nil,
		"POST /v1/repo/{name}/refresh":               nil,
		"POST /v1/webhook/git":                       map[string]string{},
		"DELETE /v1/operator/raft/peer":              nil,
		"POST /v1/operator/raft/transfer-leadership": nil,
	}

	digests := func() []string {
		var out []string
		for _, s := range c.Servers() {
			out = append(out, aclDigest(t, s.State()))
		}
		return out
	}
	table := follower.RouteTable()
	if len(table) < 50 {
		t.Fatalf("route table has %d routes; want every route of the API", len(table))
	}
	for _, rt := range table {
		method := rt.Pattern[:strings.Index(rt.Pattern, " ")]
		p, body := path(rt.Pattern), bodies[rt.Pattern]
		switch rt.Scope {
		case "":
			t.Errorf("route %s declares no ACL rule", rt.Pattern)
			continue
		case "public":
			if a := aclCall(t, follower, "", method, p, body); a.code == http.StatusUnauthorized || a.code == http.StatusForbidden {
				t.Errorf("public route %s refused without a token: %d %s", rt.Pattern, a.code, a.body)
			}
			continue
		}
		var right string
		switch rt.Scope {
		case "token":
			right = wrong.SecretID
		case "cluster":
			right = f.token("cluster", rt.Capability)
		default:
			right = f.token("job", rt.Capability)
		}
		syncAll(t, c)
		before := digests()
		if a := aclCall(t, follower, "", method, p, body); a.code != http.StatusUnauthorized {
			t.Errorf("%s without a token: %d %s; want 401", rt.Pattern, a.code, a.body)
		}
		if a := aclCall(t, follower, "not-a-token", method, p, body); a.code != http.StatusUnauthorized {
			t.Errorf("%s with a forged token: %d %s; want 401", rt.Pattern, a.code, a.body)
		}
		if rt.Scope != "token" {
			if a := aclCall(t, follower, wrong.SecretID, method, p, body); a.code != http.StatusForbidden {
				t.Errorf("%s without %s: %d %s; want 403", rt.Pattern, rt.Capability, a.code, a.body)
			}
		}
		for i, after := range digests() {
			if after != before[i] {
				t.Errorf("refused %s changed the state of server %d", rt.Pattern, i)
			}
		}
		a := aclCall(t, follower, right, method, p, body)
		if a.code == http.StatusUnauthorized || a.code == http.StatusForbidden {
			t.Errorf("%s with %s on the %s: %d %s; want neither 401 nor 403", rt.Pattern, rt.Capability, rt.Scope, a.code, a.body)
		}
		t.Logf("%-50s %-10s %-8s -> %d %.80s", rt.Pattern, rt.Scope, rt.Capability, a.code, a.errorMessage())
	}
	if a := aclCall(t, follower, "", "GET", "/metrics", nil); a.code != http.StatusOK {
		t.Errorf("/metrics without a token: %d", a.code)
	}

	// The approval recorded the approve token's name, not X-Nops-Actor.
	d, err := leader.State().Deployment(dep.ID)
	if err != nil || d == nil || len(d.Decisions) == 0 {
		t.Fatalf("deployment after the walk: %+v, %v", d, err)
	}
	if want := f.names[f.token("job", "approve")]; d.Decisions[0].Actor != want {
		t.Errorf("approval actor %q, want the token's name %q", d.Decisions[0].Actor, want)
	}
	events, _ := leader.State().Events(fsm.EventFilter{})
	for _, e := range events {
		if e.Actor == "mallory" {
			t.Errorf("event %d records the actor the client claimed: %+v", e.Seq, e)
		}
	}

	// A list shows only what the token may read.
	var other structs.ACLTokenView
	aclCall(t, follower, f.mgmt, "PUT", "/v1/acl/policy/read-other", map[string]string{"rules": "namespace \"other\" {\n capabilities = [\"read\"]\n}"}).ok(t, "policy", nil)
	aclCall(t, follower, f.mgmt, "POST", "/v1/acl/token", map[string]any{"policies": []string{"read-other"}}).ok(t, "token", &other)
	syncAll(t, c)
	var seen []*structs.Deployment
	aclCall(t, follower, other.SecretID, "GET", "/v1/deployments", nil).ok(t, "filtered list", &seen)
	if len(seen) != 0 {
		t.Errorf("a reader of namespace other sees %d deployments of default", len(seen))
	}
	aclCall(t, follower, f.token("job", "read"), "GET", "/v1/deployments", nil).ok(t, "list", &seen)
	if len(seen) == 0 {
		t.Errorf("a reader of default/web sees no deployment")
	}

	// A token works on a follower at once, even before the follower has
	// applied it: a follower forwards a token it does not know.
	for i := 0; i < 5; i++ {
		var fresh structs.ACLTokenView
		aclCall(t, leader, f.mgmt, "POST", "/v1/acl/token", map[string]any{"policies": []string{"read-other"}}).ok(t, "token", &fresh)
		aclCall(t, follower, fresh.SecretID, "GET", "/v1/acl/token/self", nil).ok(t, "a fresh token on a follower", nil)
	}

	// An expired token is refused, then collected by the leader.
	var short structs.ACLTokenView
	aclCall(t, follower, f.mgmt, "POST", "/v1/acl/token", map[string]any{"policies": []string{"elsewhere"}, "expiration_ttl": "2s"}).ok(t, "short token", &short)
	syncAll(t, c)
	aclCall(t, follower, short.SecretID, "GET", "/v1/acl/token/self", nil).ok(t, "fresh token", nil)
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		a := aclCall(t, follower, short.SecretID, "GET", "/v1/acl/token/self", nil)
		return a.code == http.StatusUnauthorized, fmt.Errorf("expired token answered %d", a.code)
	})
	testutil.WaitForResult(t, 30*time.Second, func() (bool, error) {
		for _, s := range c.Servers() {
			if tok, _ := s.State().ACL().Token(short.AccessorID); tok != nil {
				return false, fmt.Errorf("expired token still stored on %s", s.NodeID())
			}
		}
		return true, nil
	})

	// The reset file allows one more bootstrap.
	for i := 0; i < c.Size(); i++ {
		idx := leader.State().ACL().BootstrapIndex()
		if err := os.WriteFile(filepath.Join(c.Config(i).DataDir, agenthttp.ACLBootstrapResetFile), []byte(fmt.Sprintf("%d\n", idx)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var boot2 structs.ACLTokenView
	aclCall(t, follower, "", "POST", "/v1/acl/bootstrap", nil).ok(t, "bootstrap after reset", &boot2)
	if a := aclCall(t, follower, "", "POST", "/v1/acl/bootstrap", nil); a.code != http.StatusConflict {
		t.Errorf("bootstrap after the reset was used: %d, want 409", a.code)
	}

	// ACL objects come back with a snapshot restore.
	snap := aclCall(t, follower, f.mgmt, "GET", "/v1/operator/snapshot", nil)
	if snap.code != http.StatusOK || len(snap.body) == 0 {
		t.Fatalf("snapshot save: %d", snap.code)
	}
	aclCall(t, follower, f.mgmt, "DELETE", "/v1/acl/policy/elsewhere", nil).ok(t, "delete policy", nil)
	aclCall(t, follower, f.mgmt, "PUT", "/v1/operator/snapshot", string(snap.body)).ok(t, "snapshot restore", nil)
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		for _, s := range c.Servers() {
			if p, _ := s.State().ACL().Policy("elsewhere"); p == nil {
				return false, fmt.Errorf("policy not restored on %s", s.NodeID())
			}
		}
		return true, nil
	})

	// ACL objects and tokens survive the kill of the leader.
	c.Kill(c.Index(leader))
	newLeader := c.WaitForLeader(30 * time.Second)
	for _, s := range []*nopstest.Server{newLeader} {
		aclCall(t, s, boot.SecretID, "GET", "/v1/acl/policy/elsewhere", nil).ok(t, "policy after failover", nil)
		var self structs.ACLTokenView
		aclCall(t, s, f.token("job", "approve"), "GET", "/v1/acl/token/self", nil).ok(t, "token after failover", &self)
		if a := aclCall(t, s, "", "GET", "/v1/acl/policies", nil); a.code != http.StatusUnauthorized {
			t.Errorf("after failover, no token: %d", a.code)
		}
	}
}

// TestACL_ServersThatDisagreeDoNotForm: a server with acl.enabled unlike
// its peers' keeps the cluster from bootstrapping, as a different
// bootstrap_expect does.
func TestACL_ServersThatDisagreeDoNotForm(t *testing.T) {
	c := nopstest.NewCluster(t, 3, nopstest.WithoutReconcilers(), nopstest.WithConfig(func(cfg *config.Config) {
		cfg.ACL.Enabled = !strings.HasSuffix(cfg.NodeName, "-2")
	}))
	for i := 0; i < 3; i++ {
		c.Start(i)
	}
	// The three see each other...
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		n := len(c.Server(0).Members())
		return n == 3, fmt.Errorf("%d serf members", n)
	})
	// ...and form no cluster.
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		for i, s := range c.Servers() {
			if addr, _ := s.Leader(); addr != "" {
				t.Fatalf("server %d knows a leader %s: servers that disagree on acl.enabled formed a cluster", i, addr)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
}
