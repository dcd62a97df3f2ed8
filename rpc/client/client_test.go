package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/snapshot"
	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil/nopstest"
)

func TestNew_Address(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{"", client.DefaultAddress, ""},
		{"127.0.0.1:4650", "http://127.0.0.1:4650", ""},
		{"https://nops.example:4650/", "https://nops.example:4650", ""},
		{"ftp://nops.example", "", "scheme must be http or https"},
		{"http://", "", "no host"},
		{"http://h:1/?x=1", "", "must not have a query"},
	} {
		c, err := client.New(client.Config{Address: tc.in})
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("New(%q): error %v, want one containing %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("New(%q): %v", tc.in, err)
			continue
		}
		if c.Address() != tc.want {
			t.Errorf("New(%q).Address() = %q, want %q", tc.in, c.Address(), tc.want)
		}
	}
	c, err := client.New(client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if a := c.Actor(); !strings.Contains(a, "@") {
		t.Errorf("default actor %q is not user@host", a)
	}
}

func TestClient_StatusSelfAndMeta(t *testing.T) {
	s := nopstest.StartDev(t)
	c := newClient(t, s, "tester@ci")
	ctx := context.Background()

	leader, meta, err := c.Status().Leader(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if leader != s.RPCAddr() {
		t.Errorf("leader %q, want %q", leader, s.RPCAddr())
	}
	if !meta.KnownLeader || meta.LastContact != 0 {
		t.Errorf("meta %+v: want a known leader and no last contact on the leader", meta)
	}
	peers, _, err := c.Status().Peers(ctx, &client.QueryOptions{Consistent: true})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(peers, []string{s.RPCAddr()}) {
		t.Errorf("peers %v, want [%s]", peers, s.RPCAddr())
	}
	self, _, err := c.Agent().Self(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if self.NodeID != s.NodeID() || !self.IsLeader || !self.Dev || self.HTTPAddr != s.HTTPAddr() {
		t.Errorf("self %+v does not describe the server %s at %s", self, s.NodeID(), s.HTTPAddr())
	}
	members, _, err := c.Agent().Members(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 1 || members[0].Status != "alive" {
		t.Errorf("members %+v, want one alive", members)
	}
	h, err := c.Agent().Health(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if h.Status != "ok" || h.Leader != s.RPCAddr() {
		t.Errorf("health %+v", h)
	}

	// The index header follows the state.
	if _, err := c.Jobs().PauseAll(ctx, "index check"); err != nil {
		t.Fatal(err)
	}
	_, meta2, err := c.Jobs().Pauses(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if meta2.LastIndex == 0 || meta2.LastIndex <= meta.LastIndex {
		t.Errorf("index %d after a write, was %d", meta2.LastIndex, meta.LastIndex)
	}
}

func TestClient_DecisionsRecordTheActor(t *testing.T) {
	s := nopstest.StartDev(t)
	c := newClient(t, s, "alice@laptop")
	ctx := context.Background()

	a := s.CreatePending("default", "web")
	b := s.CreatePending("default", "api")

	got, err := c.Deployments().Approve(ctx, a.ID[:8], "looks good")
	if err != nil {
		t.Fatalf("approve by prefix: %v", err)
	}
	if got.ID != a.ID || got.State != structs.StateApplying {
		t.Errorf("approved deployment %s is %s, want %s applying", got.ID, got.State, a.ID)
	}
	if len(got.Decisions) != 1 || got.Decisions[0].Actor != "alice@laptop" || got.Decisions[0].Comment != "looks good" {
		t.Errorf("decisions %+v, want one approve by alice@laptop", got.Decisions)
	}
	if got.Spec != nil {
		t.Error("the API returned the job spec")
	}

	rej, err := c.Deployments().Reject(ctx, b.ID, "not now")
	if err != nil {
		t.Fatal(err)
	}
	if rej.State != structs.StateRejected {
		t.Errorf("rejected deployment is %s", rej.State)
	}

	// Approving again is a conflict.
	_, err = c.Deployments().Approve(ctx, a.ID, "")
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.StatusCode != http.StatusConflict || !strings.Contains(ae.Message, "not pending approval") {
		t.Fatalf("second approve: %v, want a 409 naming the state", err)
	}

	events, _, err := c.Deployments().Events(ctx, a.ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	var actors []string
	for _, e := range events {
		actors = append(actors, e.To+"/"+e.Actor)
	}
	if !slices.Contains(actors, "applying/alice@laptop") {
		t.Errorf("events %v: want the approval by alice@laptop", actors)
	}
}

func TestClient_Errors(t *testing.T) {
	s := nopstest.StartDev(t)
	c := newClient(t, s, "tester@ci")
	ctx := context.Background()

	_, _, err := c.Deployments().Info(ctx, "0000-missing", nil)
	if !client.IsNotFound(err) {
		t.Errorf("missing deployment: %v, want a 404", err)
	}

	_, err = c.Windows().Put(ctx, &structs.WindowSpec{Name: "bad", Kind: "maybe", Schedule: "nope", Duration: "1h", Timezone: "UTC"})
	var ae *client.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("bad window: %v, want an *APIError", err)
	}
	if ae.StatusCode != http.StatusBadRequest || len(ae.Problems) != 2 {
		t.Fatalf("bad window: %d %q %q, want 400 with two problems", ae.StatusCode, ae.Message, ae.Problems)
	}
	if !strings.Contains(ae.Problems[0], "kind") || !strings.Contains(ae.Problems[1], "schedule") {
		t.Errorf("problems %q do not name kind and schedule", ae.Problems)
	}

	_, _, err = c.Deployments().List(ctx, client.DeploymentFilter{State: "sleeping"}, nil)
	if client.StatusCode(err) != http.StatusBadRequest || !strings.Contains(err.Error(), "sleeping") {
		t.Errorf("bad state filter: %v", err)
	}
}

func TestClient_Unreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := "http://" + ln.Addr().String()
	ln.Close()
	c, err := client.New(client.Config{Address: addr})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c.Agent().Self(context.Background(), nil)
	var ue *client.UnreachableError
	if !errors.As(err, &ue) || ue.Address != addr || !strings.Contains(err.Error(), addr) {
		t.Fatalf("err %v, want an UnreachableError naming %s", err, addr)
	}
	if client.StatusCode(err) != 0 {
		t.Error("an unreachable server has no status code")
	}
}

func TestClient_Pagination(t *testing.T) {
	s := nopstest.StartDev(t)
	c := newClient(t, s, "tester@ci")
	ctx := context.Background()
	var ids []string
	for _, job := range []string{"a", "b", "c"} {
		ids = append(ids, s.CreatePending("default", job).ID)
	}
	page1, meta, err := c.Deployments().List(ctx, client.DeploymentFilter{}, &client.QueryOptions{Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(page1) != 2 || meta.NextToken == "" {
		t.Fatalf("page 1: %d deployments, next %q; want 2 and a token", len(page1), meta.NextToken)
	}
	page2, meta2, err := c.Deployments().List(ctx, client.DeploymentFilter{}, &client.QueryOptions{Limit: 2, Next: meta.NextToken})
	if err != nil {
		t.Fatal(err)
	}
	if len(page2) != 1 || meta2.NextToken != "" {
		t.Fatalf("page 2: %d deployments, next %q; want 1 and no token", len(page2), meta2.NextToken)
	}
	got := []string{page1[0].ID, page1[1].ID, page2[0].ID}
	want := []string{ids[2], ids[1], ids[0]}
	if !slices.Equal(got, want) {
		t.Errorf("pages %v, want newest first %v", got, want)
	}
	only, _, err := c.Deployments().List(ctx, client.DeploymentFilter{Namespace: "default", JobID: "b", State: "pending_approval"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(only) != 1 || only[0].ID != ids[1] {
		t.Errorf("filter by job b: %d deployments", len(only))
	}
}

func TestClient_EventsLongPoll(t *testing.T) {
	s := nopstest.StartDev(t)
	c := newClient(t, s, "poller@ci")
	ctx := context.Background()
	if _, err := c.Jobs().PauseAll(ctx, "first"); err != nil {
		t.Fatal(err)
	}
	events, _, err := c.Events().List(ctx, "", "", 0, nil)
	if err != nil || len(events) != 1 {
		t.Fatalf("events %v, %v: want one", events, err)
	}
	last := events[0].Seq

	// Nothing new: the poll waits, then answers empty.
	start := time.Now()
	none, _, err := c.Events().List(ctx, itoa(last), "", 300*time.Millisecond, nil)
	if err != nil || len(none) != 0 {
		t.Fatalf("empty poll: %v, %v", none, err)
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Errorf("empty poll answered after %s, before its wait", took)
	}

	// A new event ends the poll early.
	type result struct {
		events []*structs.Event
		err    error
		took   time.Duration
	}
	ch := make(chan result, 1)
	go func() {
		start := time.Now()
		evs, _, err := c.Events().List(ctx, itoa(last), "pause", 20*time.Second, nil)
		ch <- result{evs, err, time.Since(start)}
	}()
	time.Sleep(200 * time.Millisecond)
	if _, err := c.Jobs().ResumeAll(ctx, "second"); err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	if len(r.events) != 1 || r.events[0].Message != "second" || r.events[0].Actor != "poller@ci" {
		t.Fatalf("poll returned %+v", r.events)
	}
	if r.took > 10*time.Second {
		t.Errorf("poll took %s: it did not end on the new event", r.took)
	}

	// A time works as since, and the kind filters.
	evs, _, err := c.Events().List(ctx, events[0].Time.Add(-time.Second).Format(time.RFC3339), "window", 0, nil)
	if err != nil || len(evs) != 0 {
		t.Errorf("window events since a time: %v, %v; want none", evs, err)
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

func TestClient_WindowsAndPauses(t *testing.T) {
	s := nopstest.StartDev(t)
	c := newClient(t, s, "ops@ci")
	ctx := context.Background()
	spec := &structs.WindowSpec{Name: "night", Kind: "deny", Schedule: "0 22 * * *", Duration: "8h", Namespaces: []string{"default"}}
	w, err := c.Windows().Put(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if w.Name != "night" || w.Timezone != "UTC" || w.CreateIndex == 0 {
		t.Errorf("stored window %+v", w)
	}
	got, _, err := c.Windows().Info(ctx, "night", nil)
	if err != nil || got.Schedule != "0 22 * * *" {
		t.Fatalf("window %+v, %v", got, err)
	}
	if err := c.Windows().Delete(ctx, "night"); err != nil {
		t.Fatal(err)
	}
	list, _, err := c.Windows().List(ctx, nil)
	if err != nil || len(list) != 0 {
		t.Fatalf("windows after delete: %v, %v", list, err)
	}
	if err := c.Windows().Delete(ctx, "night"); !client.IsNotFound(err) {
		t.Errorf("delete of a missing window: %v, want 404", err)
	}

	pauses, err := c.Jobs().Pause(ctx, "", "web", "db upgrade")
	if err != nil {
		t.Fatal(err)
	}
	if len(pauses) != 1 || pauses[0].Key != "default/web" || pauses[0].Actor != "ops@ci" {
		t.Fatalf("pauses %+v", pauses)
	}
	lift, err := c.Jobs().DeployNow(ctx, "default", "web")
	if err != nil {
		t.Fatal(err)
	}
	if lift == nil || lift.JobID != "web" || lift.Actor != "ops@ci" {
		t.Errorf("lift %+v", lift)
	}
	pauses, err = c.Jobs().Resume(ctx, "default", "web", "done")
	if err != nil || len(pauses) != 0 {
		t.Errorf("pauses after resume: %v, %v", pauses, err)
	}
}

func TestClient_RaftOperator(t *testing.T) {
	s := nopstest.StartDev(t)
	c := newClient(t, s, "ops@ci")
	ctx := context.Background()
	conf, _, err := c.Operator().RaftConfiguration(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(conf.Servers) != 1 {
		t.Fatalf("servers %+v", conf.Servers)
	}
	srv := conf.Servers[0]
	if srv.ID != s.NodeID() || !srv.Leader || !srv.Voter || srv.Address != s.RPCAddr() || srv.RaftProtocol == "" {
		t.Errorf("server %+v", srv)
	}
	err = c.Operator().RaftRemovePeer(ctx, "no-such-peer")
	if !client.IsNotFound(err) || !strings.Contains(err.Error(), "no-such-peer") {
		t.Errorf("remove of an unknown peer: %v, want a 404 naming it", err)
	}
}

func TestClient_SnapshotRoundTrip(t *testing.T) {
	s := nopstest.StartDev(t)
	c := newClient(t, s, "ops@ci")
	ctx := context.Background()
	if _, err := c.Windows().Put(ctx, &structs.WindowSpec{Name: "keep", Kind: "allow", Schedule: "0 9 * * 1-5", Duration: "9h"}); err != nil {
		t.Fatal(err)
	}
	body, meta, err := c.Operator().SnapshotSave(ctx)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(body)
	body.Close()
	if err != nil {
		t.Fatal(err)
	}
	arc, err := snapshot.Read(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("the saved archive does not verify: %v", err)
	}
	if meta.LastIndex != arc.Meta.Index || arc.Meta.Index == 0 {
		t.Errorf("index header %d, archive index %d", meta.LastIndex, arc.Meta.Index)
	}
	st, err := fsm.ReadOnly(arc.State())
	if err != nil {
		t.Fatal(err)
	}
	counts, err := st.Counts()
	if err != nil {
		t.Fatal(err)
	}
	if counts[fsm.TableWindows] != 1 {
		t.Errorf("counts %v: want the window", counts)
	}

	if err := c.Windows().Delete(ctx, "keep"); err != nil {
		t.Fatal(err)
	}
	res, err := c.Operator().SnapshotRestore(ctx, bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	if res.RestoredIndex == 0 {
		t.Errorf("restore answered %+v", res)
	}
	if _, _, err := c.Windows().Info(ctx, "keep", nil); err != nil {
		t.Errorf("window after restore: %v", err)
	}

	// A corrupt archive is refused with a 400.
	bad := append([]byte(nil), raw...)
	bad[len(bad)/2] ^= 0xff
	if _, err := c.Operator().SnapshotRestore(ctx, bytes.NewReader(bad)); client.StatusCode(err) != http.StatusBadRequest {
		t.Errorf("corrupt restore: %v, want 400", err)
	}
}

// TestClient_ReconcilerRoutes: the client's methods for the reconcilers'
// routes reach the reconciler with the arguments given and return its
// answers whole: /v1/jobs keeps each job's deployments and last
// reconcile.
func TestClient_ReconcilerRoutes(t *testing.T) {
	fake := fakeReconciler()
	s := nopstest.StartDev(t, nopstest.WithReconciler(fake))
	c := newClient(t, s, "ops@ci")
	ctx := context.Background()

	jobs, _, err := c.Jobs().List(ctx, nil)
	if err != nil || len(jobs) != 2 || jobs[1].Sync != structs.SyncDrift {
		t.Fatalf("jobs %+v, %v", jobs, err)
	}
	if !reflect.DeepEqual(jobs, fake.JobList) {
		t.Errorf("jobs lost what the server answered:\n got %s\nwant %s", dump(jobs), dump(fake.JobList))
	}
	if jobs[0].LastDeployment == nil || jobs[0].LastDeployment.ID != "d-last" || jobs[1].ActiveDeployment == nil ||
		jobs[1].ActiveDeployment.State != structs.StateApplying || jobs[0].LastReconciled == nil {
		t.Errorf("jobs %s: want the deployments and the last reconcile", dump(jobs))
	}
	job, _, err := c.Jobs().Info(ctx, "", "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	if job.Status == nil || job.Status.JobID != "web" || job.ActiveDeployment != nil || job.LastDeployment == nil ||
		job.LastDeployment.ID != "d-last" || job.Pause == nil || job.Pause.Reason != "db upgrade" || job.Block != nil {
		t.Errorf("job detail %+v", job)
	}
	if _, _, err := c.Jobs().Info(ctx, "default", "nope", nil); !client.IsNotFound(err) {
		t.Errorf("missing job: %v, want 404", err)
	}
	block, err := c.Jobs().Retry(ctx, "prod", "web")
	if err != nil || block == nil || block.DeploymentID != "d-failed" {
		t.Fatalf("retry: %+v, %v", block, err)
	}
	repos, _, err := c.Repos().List(ctx, nil)
	if err != nil || len(repos) != 1 || repos[0].Files != 4 {
		t.Fatalf("repos %+v, %v", repos, err)
	}
	repo, err := c.Repos().Refresh(ctx, "ops")
	if err != nil || repo.Head != strings.Repeat("c", 40) {
		t.Fatalf("refresh: %+v, %v", repo, err)
	}
	if _, err := c.Repos().Refresh(ctx, "none"); !client.IsNotFound(err) {
		t.Errorf("refresh of an unknown repository: %v, want 404", err)
	}
	orphans, _, err := c.Jobs().Orphans(ctx, nil)
	if err != nil || len(orphans) != 1 || !orphans[0].Orphan {
		t.Fatalf("orphans %+v, %v", orphans, err)
	}
	if p, err := c.Deployments().Promote(ctx, "d-1"); err != nil || p.Promoted != "d-1" {
		t.Fatalf("promote: %+v, %v", p, err)
	}
	h, _, err := c.Deployments().NomadHealth(ctx, "d-1", nil)
	if err != nil || !reflect.DeepEqual(h, fake.Health) {
		t.Fatalf("nomad health %+v, %v", h, err)
	}
	cycle, _, err := c.Status().DetectionCycle(ctx, nil)
	if err != nil || cycle == nil || cycle.Drifted != 1 {
		t.Fatalf("cycle %+v, %v", cycle, err)
	}
	want := []string{
		`Jobs "" ""`, "Job default/web", "Job default/nope", "Retry prod/web by ops@ci",
		"Repos", "Refresh ops", "Refresh none", "Orphans", "PromoteDeployment d-1 by ops@ci", "NomadHealth d-1",
		"Cycle",
	}
	if got := fake.Calls(); !slices.Equal(got, want) {
		t.Errorf("calls\n got %q\nwant %q", got, want)
	}
}

func dump(v any) string {
	raw, _ := json.Marshal(v)
	return string(raw)
}

// The token and the actor travel in their headers: a reverse proxy in front
// of the real server records them.
func TestClient_SendsTokenAndActor(t *testing.T) {
	s := nopstest.StartDev(t)
	target, _ := url.Parse("http://" + s.HTTPAddr())
	var mu sync.Mutex
	var seen []http.Header
	proxy := httputil.NewSingleHostReverseProxy(target)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Clone())
		mu.Unlock()
		proxy.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })

	c, err := client.New(client.Config{Address: "http://" + ln.Addr().String(), Token: "s3cr3t", Actor: "bob@desk"})
	if err != nil {
		t.Fatal(err)
	}
	pauses, err := c.Jobs().PauseAll(context.Background(), "through the proxy")
	if err != nil {
		t.Fatal(err)
	}
	if len(pauses) != 1 || pauses[0].Actor != "bob@desk" {
		t.Errorf("pauses %+v: want the actor recorded", pauses)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0].Get(client.HeaderToken) != "s3cr3t" || seen[0].Get(client.HeaderActor) != "bob@desk" {
		t.Errorf("headers seen %v", seen)
	}
}

// TestClient_ReadYourWrites: a write raises the index the client's reads
// ask for (X-Nops-Min-Index) to the index it was answered with, and a read
// sends it: a server that has not applied that index answers 503 naming
// it rather than an older state.
func TestClient_ReadYourWrites(t *testing.T) {
	s := nopstest.StartDev(t)
	ctx := context.Background()
	c := newClient(t, s, "ops@ci")
	if c.MinIndex() != 0 {
		t.Fatalf("a new client asks for index %d", c.MinIndex())
	}
	w, err := c.Windows().Put(ctx, &structs.WindowSpec{Name: "ryw", Kind: "deny", Schedule: "0 22 * * *", Duration: "8h"})
	if err != nil {
		t.Fatal(err)
	}
	if c.MinIndex() < w.ModifyIndex {
		t.Fatalf("after a write at index %d the client asks for %d", w.ModifyIndex, c.MinIndex())
	}
	if _, meta, err := c.Windows().Info(ctx, "ryw", nil); err != nil || meta.LastIndex < c.MinIndex() {
		t.Fatalf("read after the write: %v, meta %+v", err, meta)
	}

	const far = uint64(1) << 60
	ahead, err := client.New(client.Config{Address: "http://" + s.HTTPAddr(), MinIndex: far})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = ahead.Windows().Info(ctx, "ryw", nil)
	if client.StatusCode(err) != http.StatusServiceUnavailable || !strings.Contains(err.Error(), itoa(far)) {
		t.Fatalf("a read asking for index %d: %v, want 503 naming it", far, err)
	}
}
