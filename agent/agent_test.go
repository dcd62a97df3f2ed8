package agent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// devConfig returns the configuration of a single server on free ports.
func devConfig(t *testing.T, dataDir string) *config.Config {
	t.Helper()
	cfg := config.Default()
	cfg.DataDir = dataDir
	cfg.Bind, cfg.Advertise = "127.0.0.1", "127.0.0.1"
	cfg.HTTPPort, cfg.RPCPort, cfg.SerfPort = 0, 0, 0
	cfg.BootstrapExpect = 1
	cfg.NodeName = "test-" + strings.ReplaceAll(t.Name(), "/", "-")
	cfg.Encrypt = nopstest.GossipKey
	cfg.InsecureRPC = true
	return cfg
}

func startServer(t *testing.T, cfg *config.Config) *agent.Server {
	t.Helper()
	logger := hclog.New(&hclog.LoggerOptions{Name: "nops", Level: hclog.Warn, Output: io.Discard})
	if testing.Verbose() {
		logger = hclog.New(&hclog.LoggerOptions{Name: "nops", Level: hclog.Debug})
	}
	s, err := agent.New(cfg, logger, agent.Options{})
	if err != nil {
		t.Fatalf("start server: %v", err)
	}
	t.Cleanup(s.Shutdown)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if _, err := s.WaitForLeader(ctx, 15*time.Second); err != nil {
		t.Fatalf("no leader: %v", err)
	}
	// The single server must itself be the leader before writes.
	deadline := time.Now().Add(10 * time.Second)
	for !s.IsLeader() {
		if time.Now().After(deadline) {
			t.Fatal("server did not become leader")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return s
}

func do(t *testing.T, s *agent.Server, method, path, body string) (int, map[string]any, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.HTTPAddr()+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Nops-Actor", "tester")
	nopstest.SetContentType(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if len(bytes.TrimSpace(raw)) > 0 && raw[0] == '{' {
		if err := json.Unmarshal(raw, &out); err != nil {
			t.Fatalf("decode %s: %v", raw, err)
		}
	}
	return resp.StatusCode, out, resp.Header
}

func createDeployment(t *testing.T, s *agent.Server, id, job string, hooks bool) {
	t.Helper()
	d := &structs.Deployment{ID: id, Namespace: "default", JobID: job, Repository: "r", Commit: "abcdef0123",
		File: job + ".nomad.hcl", Policy: structs.PolicyApproval, State: structs.StateDetected, SpecHash: "h1",
		Spec: []byte(`{"ID":"` + job + `","Meta":{"password":"hunter2"}}`), Diff: "+ job", DiffHash: "d1"}
	if hooks {
		d.Hooks = []structs.FrozenHook{{Name: "backup", Phase: structs.PhasePre, RevisionJobID: "backup-0123abcd", Hash: "0123abcd"}}
	}
	now := time.Now().UTC()
	if _, err := s.Apply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{
		WriteMeta: structs.WriteMeta{Time: now, Actor: "nops"}, Deployment: d}); err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := s.Apply(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{
		WriteMeta: structs.WriteMeta{Time: now, Actor: "nops"}, ID: id, To: structs.StatePendingApproval}); err != nil {
		t.Fatalf("transition: %v", err)
	}
}

// TestServer_DataDirIsPrivate: the data dir holds job specs with their
// secrets and token hashes (raft.db, snapshots): a server creates it, its
// raft dir and raft.db readable by its own user only, whatever the umask.
func TestServer_DataDirIsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s := startServer(t, devConfig(t, dir))
	s.Shutdown()
	for _, f := range []struct {
		path string
		want os.FileMode
	}{
		{dir, 0o700},
		{filepath.Join(dir, "raft"), 0o700},
		{filepath.Join(dir, "raft", "raft.db"), 0o600},
	} {
		fi, err := os.Stat(f.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != f.want {
			t.Errorf("%s has mode %v, want %v", filepath.Base(f.path), fi.Mode().Perm(), f.want)
		}
	}
}

// TestServer_RestartKeepsState restarts a server on its data dir and finds
// its deployments, pauses and windows as they were.
func TestServer_RestartKeepsState(t *testing.T) {
	dir := t.TempDir()
	cfg := devConfig(t, dir)
	s := startServer(t, cfg)
	createDeployment(t, s, "11111111-aaaa-bbbb-cccc-000000000001", "web", false)
	if code, body, _ := do(t, s, "POST", "/v1/job/default/api/pause", `{"reason":"maintenance"}`); code != 200 {
		t.Fatalf("pause: %d %v", code, body)
	}
	if code, body, _ := do(t, s, "PUT", "/v1/window/nights",
		`{"kind":"deny","schedule":"0 22 * * *","duration":"8h","timezone":"Europe/Paris","jobs":["web*"]}`); code != 200 {
		t.Fatalf("window: %d %v", code, body)
	}
	id := s.NodeID()
	s.Shutdown()

	cfg2 := devConfig(t, dir)
	s2 := startServer(t, cfg2)
	if s2.NodeID() != id {
		t.Fatalf("node ID changed across restart: %s != %s", s2.NodeID(), id)
	}
	st := s2.State()
	d, err := st.Deployment("11111111-aaaa-bbbb-cccc-000000000001")
	if err != nil || d == nil {
		t.Fatalf("deployment lost across restart: %v", err)
	}
	if d.State != structs.StatePendingApproval || string(d.Spec) == "" {
		t.Fatalf("deployment changed across restart: %+v", d)
	}
	p, err := st.Paused("", "default", "api")
	if err != nil || p == nil || p.Reason != "maintenance" || p.Actor != "tester" {
		t.Fatalf("pause lost across restart: %+v %v", p, err)
	}
	w, err := st.Window("nights")
	if err != nil || w == nil || w.Timezone != "Europe/Paris" || w.Kind != structs.WindowDeny {
		t.Fatalf("window lost across restart: %+v %v", w, err)
	}
	events, _ := st.Events(fsmAll())
	if len(events) < 4 {
		t.Fatalf("events lost across restart: %d", len(events))
	}
	// And the restarted server still takes writes.
	if code, body, _ := do(t, s2, "POST", "/v1/deployment/11111111-aaaa-bbbb-cccc-000000000001/approve", `{"comment":"ok"}`); code != 200 {
		t.Fatalf("approve after restart: %d %v", code, body)
	}
}

// TestAPI_BadInput checks that bad input answers with a status and a message
// that names the problem, and changes nothing.
func TestAPI_BadInput(t *testing.T) {
	s := startServer(t, devConfig(t, t.TempDir()))
	createDeployment(t, s, "22222222-aaaa-bbbb-cccc-000000000002", "web", false)
	snapshot := func() string {
		counts, err := s.State().Counts()
		if err != nil {
			t.Fatal(err)
		}
		events, _ := s.State().Events(fsmAll())
		d, _ := s.State().Deployment("22222222-aaaa-bbbb-cccc-000000000002")
		return fmt.Sprintf("%v events=%d state=%s decisions=%d", counts, len(events), d.State, len(d.Decisions))
	}
	before := snapshot()

	cases := []struct {
		name, method, path, body string
		code                     int
		msg                      string
	}{
		{"malformed json", "POST", "/v1/deployment/22222222-aaaa-bbbb-cccc-000000000002/approve", `{"comment":`, 400, "malformed JSON"},
		{"unknown field", "POST", "/v1/deployment/22222222-aaaa-bbbb-cccc-000000000002/approve", `{"comment":"x","force":true}`, 400, `unknown field "force"`},
		{"wrong type", "POST", "/v1/deployment/22222222-aaaa-bbbb-cccc-000000000002/approve", `{"comment":5}`, 400, `field "comment"`},
		{"trailing data", "POST", "/v1/pause", `{"reason":"a"} {}`, 400, "after the JSON value"},
		{"oversize body", "POST", "/v1/pause", `{"reason":"` + strings.Repeat("x", 2<<20) + `"}`, 413, "too large"},
		{"bad cron", "PUT", "/v1/window/w1", `{"kind":"deny","schedule":"61 * * * *","duration":"1h"}`, 400, "schedule"},
		{"bad time zone", "PUT", "/v1/window/w1", `{"kind":"deny","schedule":"0 1 * * *","duration":"1h","timezone":"Mars/Olympus"}`, 400, "timezone"},
		{"bad duration and kind together", "PUT", "/v1/window/w1", `{"kind":"maybe","schedule":"0 1 * * *","duration":"soon"}`, 400, "kind: must be allow or deny"},
		{"bad glob", "PUT", "/v1/window/w1", `{"kind":"deny","schedule":"0 1 * * *","duration":"1h","jobs":[""]}`, 400, "jobs"},
		{"not found", "POST", "/v1/deployment/33333333-0000-0000-0000-000000000000/approve", `{}`, 404, "not found"},
		{"bad state filter", "GET", "/v1/deployments?state=sleeping", ``, 400, "state"},
		{"bad limit", "GET", "/v1/deployments?limit=-1", ``, 400, "limit"},
		{"resume not paused", "POST", "/v1/resume", `{}`, 404, "not paused"},
		{"unknown endpoint", "GET", "/v1/nothing", ``, 404, "no such endpoint"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body, _ := do(t, s, tc.method, tc.path, tc.body)
			if code != tc.code {
				t.Fatalf("status %d, want %d (%v)", code, tc.code, body)
			}
			if after := snapshot(); after != before {
				t.Fatalf("bad input changed the state: %s -> %s", before, after)
			}
			msg, _ := body["error"].(string)
			if !strings.Contains(msg, tc.msg) {
				t.Fatalf("error %q does not name the problem %q", msg, tc.msg)
			}
		})
	}
	// Several problems are all listed.
	_, body, _ := do(t, s, "PUT", "/v1/window/w1", `{"kind":"maybe","schedule":"nope","duration":"soon","timezone":"Nowhere/Town"}`)
	if probs, _ := body["problems"].([]any); len(probs) != 4 {
		t.Fatalf("want 4 problems listed, got %v", body)
	}
	if after := snapshot(); after != before {
		t.Fatalf("bad input changed the state: %s -> %s", before, after)
	}
	if w, _ := s.State().Windows(); len(w) != 0 {
		t.Fatalf("bad window stored: %+v", w)
	}
	d, _ := s.State().Deployment("22222222-aaaa-bbbb-cccc-000000000002")
	if d.State != structs.StatePendingApproval || len(d.Decisions) != 0 {
		t.Fatalf("deployment changed by bad input: %+v", d)
	}
}

// TestAPI_Decisions covers approve and reject through the API, the 409s of
// the FSM's rules, and that the spec never shows.
func TestAPI_Decisions(t *testing.T) {
	s := startServer(t, devConfig(t, t.TempDir()))
	createDeployment(t, s, "44444444-aaaa-bbbb-cccc-000000000004", "web", true)
	createDeployment(t, s, "55555555-aaaa-bbbb-cccc-000000000005", "api", false)

	// A pause refuses approval with 409.
	if code, _, _ := do(t, s, "POST", "/v1/pause", `{"reason":"freeze"}`); code != 200 {
		t.Fatal("pause failed")
	}
	code, body, _ := do(t, s, "POST", "/v1/deployment/44444444-aaaa-bbbb-cccc-000000000004/approve", `{"comment":"go"}`)
	if code != 409 || !strings.Contains(body["error"].(string), "paused by tester (freeze)") {
		t.Fatalf("approve while paused: %d %v", code, body)
	}
	if code, _, _ := do(t, s, "POST", "/v1/resume", `{"reason":"thaw"}`); code != 200 {
		t.Fatal("resume failed")
	}
	code, body, hdr := do(t, s, "POST", "/v1/deployment/44444444-aaaa-bbbb-cccc-000000000004/approve", `{"comment":"go"}`)
	if code != 200 || body["state"] != string(structs.StatePreHook) {
		t.Fatalf("approve: %d %v", code, body)
	}
	if hdr.Get("X-Nops-Index") == "" || hdr.Get("X-Nops-Known-Leader") != "true" || hdr.Get("X-Nops-Last-Contact") == "" {
		t.Fatalf("missing cluster headers: %v", hdr)
	}
	if _, ok := body["spec"]; ok {
		t.Fatal("the API shows the job spec")
	}
	decisions := body["decisions"].([]any)
	if d := decisions[0].(map[string]any); d["actor"] != "tester" || d["comment"] != "go" || d["kind"] != "approve" {
		t.Fatalf("decision not recorded: %v", d)
	}
	// A second approve is a conflict.
	code, body, _ = do(t, s, "POST", "/v1/deployment/44444444-aaaa-bbbb-cccc-000000000004/approve", `{}`)
	if code != 409 || !strings.Contains(body["error"].(string), "not pending approval") {
		t.Fatalf("second approve: %d %v", code, body)
	}
	// Reject by prefix, then the events show both decisions.
	code, body, _ = do(t, s, "POST", "/v1/deployment/55555555/reject", `{"reason":"not now"}`)
	if code != 200 || body["state"] != string(structs.StateRejected) {
		t.Fatalf("reject: %d %v", code, body)
	}
	resp, err := http.Get("http://" + s.HTTPAddr() + "/v1/deployment/55555555-aaaa-bbbb-cccc-000000000005/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []structs.Event
	if err := json.NewDecoder(resp.Body).Decode(&events); err != nil {
		t.Fatal(err)
	}
	last := events[len(events)-1]
	if last.From != "pending_approval" || last.To != "rejected" || last.Actor != "tester" || !strings.Contains(last.Message, "not now") {
		t.Fatalf("reject event: %+v", last)
	}
	raw, _ := json.Marshal(events)
	if strings.Contains(string(raw), "hunter2") {
		t.Fatal("a secret from the spec reached the events")
	}
	// Lists: newest first, filter and pagination.
	resp2, err := http.Get("http://" + s.HTTPAddr() + "/v1/deployments?limit=1")
	if err != nil {
		t.Fatal(err)
	}
	var page []structs.Deployment
	_ = json.NewDecoder(resp2.Body).Decode(&page)
	resp2.Body.Close()
	next := resp2.Header.Get("X-Nops-Next-Token")
	if len(page) != 1 || page[0].JobID != "api" || next == "" {
		t.Fatalf("first page: %+v next=%q", page, next)
	}
	resp3, err := http.Get(fmt.Sprintf("http://%s/v1/deployments?limit=1&next=%s", s.HTTPAddr(), next))
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp3.Body).Decode(&page)
	resp3.Body.Close()
	if len(page) != 1 || page[0].JobID != "web" {
		t.Fatalf("second page: %+v", page)
	}
}
