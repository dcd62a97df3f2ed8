package agenthttp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// clusterFixture is a server with ACLs on and the real reconcilers of two
// Nomad clusters, eu and us (SPEC section 16), whose addresses nothing
// answers: the job routes read and write the replicated state only. Both
// clusters hold default/web; default/api is eu's alone.
type clusterFixture struct {
	t *testing.T
	s *nopstest.Server
	// euDep and usDep are a pending deployment of web in each cluster.
	euDep, usDep *structs.Deployment
}

const (
	mgmtSecret = "management-secret"
	euSecret   = "eu-operator-secret"
)

func startClusterFixture(t *testing.T) *clusterFixture {
	t.Helper()
	s := nopstest.Start(t, "", nopstest.WithConfig(func(c *config.Config) {
		c.ACL.Enabled = true
		c.Nomads = []config.NomadCluster{
			{Name: "eu", Address: "http://" + testutil.ClosedAddress(t)},
			{Name: "us", Address: "http://" + testutil.ClosedAddress(t)},
		}
	}))
	f := &clusterFixture{t: t, s: s}
	meta := structs.WriteMeta{Time: time.Now().UTC(), Actor: "test"}
	f.apply(structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: meta, Statuses: []*structs.JobStatus{
		{Cluster: "eu", Namespace: "default", JobID: "web", Sync: structs.SyncInSync, ObservedAt: meta.Time},
		{Cluster: "us", Namespace: "default", JobID: "web", Sync: structs.SyncDrift, ObservedAt: meta.Time},
		{Cluster: "eu", Namespace: "default", JobID: "api", Sync: structs.SyncInSync, ObservedAt: meta.Time},
	}})
	f.euDep = s.CreatePendingWith("default", "web", func(d *structs.Deployment) { d.Cluster = "eu" })
	f.usDep = s.CreatePendingWith("default", "web", func(d *structs.Deployment) { d.Cluster = "us" })
	f.apply(structs.ACLPolicyUpsertRequestType, &structs.ACLPolicyUpsertRequest{WriteMeta: meta, Policy: &structs.ACLPolicy{
		Name: "eu-operator", Rules: "cluster \"eu\" {\n  namespace \"*\" { capabilities = [\"read\", \"pause\", \"deploy\"] }\n}"}})
	for _, tok := range []*structs.ACLToken{
		{AccessorID: "mgmt", SecretHash: structs.HashSecret(mgmtSecret), Name: "root", Type: structs.ACLManagementToken},
		{AccessorID: "eu-op", SecretHash: structs.HashSecret(euSecret), Name: "eu-op", Type: structs.ACLClientToken,
			Policies: []string{"eu-operator"}},
	} {
		f.apply(structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{WriteMeta: meta, Token: tok, Create: true})
	}
	return f
}

func (f *clusterFixture) apply(t structs.MessageType, req any) {
	f.t.Helper()
	if _, err := f.s.Apply(t, req); err != nil {
		f.t.Fatalf("apply %v: %v", t, err)
	}
}

// call sends a request with a token and answers the status and the body:
// body as JSON, or a rawBody as it is.
func (f *clusterFixture) call(secret, method, path string, body any) (int, string) {
	f.t.Helper()
	var rd io.Reader
	if raw, ok := body.(rawBody); ok {
		rd = strings.NewReader(string(raw))
	} else if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			f.t.Fatal(err)
		}
		rd = strings.NewReader(string(raw))
	}
	req, err := http.NewRequest(method, f.s.URL+path, rd)
	if err != nil {
		f.t.Fatal(err)
	}
	nopstest.SetContentType(req)
	req.Header.Set("X-Nops-Token", secret)
	resp, err := f.s.HTTPClient().Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(raw)
}

// rawBody is a request body call sends as it is, not as JSON.
type rawBody string

// expect sends a request and fails unless it answers code.
func (f *clusterFixture) expect(secret, method, path string, body any, code int) string {
	f.t.Helper()
	got, raw := f.call(secret, method, path, body)
	if got != code {
		f.t.Fatalf("%s %s: %d %s; want %d", method, path, got, raw, code)
	}
	return raw
}

// pauseKeys lists the keys of the pauses in force.
func (f *clusterFixture) pauseKeys() []string {
	f.t.Helper()
	pauses, err := f.s.State().Pauses()
	if err != nil {
		f.t.Fatal(err)
	}
	var out []string
	for _, p := range pauses {
		out = append(out, p.Key)
	}
	sort.Strings(out)
	return out
}

// TestClusters_ACLScopesJobsByCluster: a token whose policy grants
// read, pause and deploy in cluster "eu" alone reads, pauses and retries
// eu's web, is refused (403) the same namespace and ID in us, and sees
// only eu's jobs and deployments in the lists; a job route without
// ?cluster= acts on the job's one cluster, and answers 400 naming the
// clusters when two hold it.
func TestClusters_ACLScopesJobsByCluster(t *testing.T) {
	f := startClusterFixture(t)
	reason := map[string]string{"reason": "db upgrade"}

	var detail structs.JobDetail
	raw := f.expect(euSecret, "GET", "/v1/job/default/web?cluster=eu", nil, http.StatusOK)
	if err := json.Unmarshal([]byte(raw), &detail); err != nil || detail.Status.Cluster != "eu" || detail.Status.Sync != structs.SyncInSync {
		t.Fatalf("eu's web: %s (%v)", raw, err)
	}
	f.expect(euSecret, "GET", "/v1/job/default/web?cluster=us", nil, http.StatusForbidden)
	// api is eu's alone: no ?cluster= needed.
	raw = f.expect(euSecret, "GET", "/v1/job/default/api", nil, http.StatusOK)
	if err := json.Unmarshal([]byte(raw), &detail); err != nil || detail.Status.Cluster != "eu" || detail.Status.JobID != "api" {
		t.Errorf("eu's api without ?cluster=: %s (%v)", raw, err)
	}
	// web is in both: the token may act on it in eu, so it learns why.
	raw = f.expect(euSecret, "GET", "/v1/job/default/web", nil, http.StatusBadRequest)
	if !strings.Contains(raw, "eu, us") || !strings.Contains(raw, "?cluster=") {
		t.Errorf("ambiguous web: %s; want the clusters named", raw)
	}

	f.expect(euSecret, "POST", "/v1/job/default/web/pause?cluster=us", reason, http.StatusForbidden)
	f.expect(euSecret, "POST", "/v1/job/default/web/retry?cluster=us", nil, http.StatusForbidden)
	f.expect(euSecret, "POST", "/v1/job/default/web/deploy-now?cluster=us", nil, http.StatusForbidden)
	f.expect(euSecret, "POST", "/v1/job/default/web/pause", reason, http.StatusBadRequest)
	raw = f.expect(euSecret, "POST", "/v1/job/default/web/pause?cluster=mars", reason, http.StatusBadRequest)
	if !strings.Contains(raw, "mars") || !strings.Contains(raw, "eu, us") {
		t.Errorf("pause in an unknown cluster: %s; want it named", raw)
	}
	if keys := f.pauseKeys(); len(keys) != 0 {
		t.Fatalf("refused pauses left pauses %v", keys)
	}
	f.expect(euSecret, "POST", "/v1/job/default/web/pause?cluster=eu", reason, http.StatusOK)
	f.expect(euSecret, "POST", "/v1/job/default/api/pause", reason, http.StatusOK)
	if keys, want := f.pauseKeys(), []string{"eu:default/api", "eu:default/web"}; fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Errorf("pauses %v, want %v", keys, want)
	}
	// A rejected deployment blocks eu's web; the eu token lifts it.
	f.expect(mgmtSecret, "POST", "/v1/deployment/"+f.euDep.ID+"/reject", map[string]string{"reason": "no"}, http.StatusOK)
	raw = f.expect(euSecret, "POST", "/v1/job/default/web/retry?cluster=eu", nil, http.StatusOK)
	var block structs.Block
	if err := json.Unmarshal([]byte(raw), &block); err != nil || block.Cluster != "eu" || !block.Retried || block.RetriedBy != "eu-op" {
		t.Errorf("retry of eu's web: %s (%v)", raw, err)
	}
	f.expect(euSecret, "POST", "/v1/job/default/web/deploy-now?cluster=eu", nil, http.StatusOK)
	if lift, err := f.s.State().Lift("eu", "default", "web"); err != nil || lift == nil {
		t.Errorf("deploy-now of eu's web: lift %+v, %v", lift, err)
	}
	if lift, err := f.s.State().Lift("us", "default", "web"); err != nil || lift != nil {
		t.Errorf("us's web got a lift %+v (%v) from a refused request", lift, err)
	}

	// Deployments: by ID, the deployment's own cluster decides.
	f.expect(euSecret, "GET", "/v1/deployment/"+f.euDep.ID, nil, http.StatusOK)
	f.expect(euSecret, "GET", "/v1/deployment/"+f.usDep.ID, nil, http.StatusForbidden)

	// Lists hold eu's items alone.
	var jobs []*structs.JobSummary
	raw = f.expect(euSecret, "GET", "/v1/jobs", nil, http.StatusOK)
	if err := json.Unmarshal([]byte(raw), &jobs); err != nil || len(jobs) != 2 || jobs[0].Cluster != "eu" || jobs[1].Cluster != "eu" {
		t.Errorf("jobs the eu token sees: %s (%v); want eu's two", raw, err)
	}
	var deps []*structs.Deployment
	raw = f.expect(euSecret, "GET", "/v1/deployments", nil, http.StatusOK)
	if err := json.Unmarshal([]byte(raw), &deps); err != nil || len(deps) != 1 || deps[0].ID != f.euDep.ID {
		t.Errorf("deployments the eu token sees: %s (%v); want eu's", raw, err)
	}
	raw = f.expect(mgmtSecret, "GET", "/v1/deployments?cluster=us", nil, http.StatusOK)
	if err := json.Unmarshal([]byte(raw), &deps); err != nil || len(deps) != 1 || deps[0].ID != f.usDep.ID {
		t.Errorf("deployments of us: %s (%v); want us's", raw, err)
	}
	raw = f.expect(mgmtSecret, "GET", "/v1/jobs?cluster=us", nil, http.StatusOK)
	if err := json.Unmarshal([]byte(raw), &jobs); err != nil || len(jobs) != 1 || jobs[0].Cluster != "us" {
		t.Errorf("jobs of us: %s (%v)", raw, err)
	}
	for _, path := range []string{"/v1/jobs?cluster=mars", "/v1/deployments?cluster=mars", "/v1/orphans?cluster=mars", "/v1/events?cluster=mars"} {
		f.expect(mgmtSecret, "GET", path, nil, http.StatusBadRequest)
	}
}

// TestClusters_PauseWholeCluster: POST /v1/pause with a cluster pauses
// every job of that cluster and no other, POST /v1/resume with it ends
// that pause alone; an unknown cluster is a 400 that changes nothing; a
// token with pause on a cluster's jobs but not on the Nops cluster may
// not pause a whole cluster. Every answer of the lists carries cluster,
// and the events filter by it.
func TestClusters_PauseWholeCluster(t *testing.T) {
	f := startClusterFixture(t)
	f.expect(euSecret, "POST", "/v1/pause", map[string]string{"reason": "x", "cluster": "eu"}, http.StatusForbidden)
	f.expect(mgmtSecret, "POST", "/v1/pause", map[string]string{"reason": "x", "cluster": "mars"}, http.StatusBadRequest)
	if keys := f.pauseKeys(); len(keys) != 0 {
		t.Fatalf("refused pauses left pauses %v", keys)
	}
	raw := f.expect(mgmtSecret, "POST", "/v1/pause", map[string]string{"reason": "eu maintenance", "cluster": "eu"}, http.StatusOK)
	var pauses []*structs.Pause
	if err := json.Unmarshal([]byte(raw), &pauses); err != nil || len(pauses) != 1 || pauses[0].Global ||
		pauses[0].Key != structs.ClusterPauseKey("eu") || pauses[0].Cluster != "eu" {
		t.Fatalf("pause of eu: %s (%v)", raw, err)
	}
	for cluster, paused := range map[string]bool{"eu": true, "us": false} {
		var d structs.JobDetail
		raw := f.expect(mgmtSecret, "GET", "/v1/job/default/web?cluster="+cluster, nil, http.StatusOK)
		if err := json.Unmarshal([]byte(raw), &d); err != nil || (d.Pause != nil) != paused {
			t.Errorf("web of %s: pause %+v (%v), want paused %v", cluster, d.Pause, err, paused)
		}
	}

	// The events of the pause carry eu; us's filter leaves them out.
	var events []*structs.Event
	raw = f.expect(mgmtSecret, "GET", "/v1/events?kind=pause", nil, http.StatusOK)
	if err := json.Unmarshal([]byte(raw), &events); err != nil || len(events) != 1 || events[0].Cluster != "eu" {
		t.Fatalf("pause events: %s (%v)", raw, err)
	}
	raw = f.expect(mgmtSecret, "GET", "/v1/events?kind=pause&cluster=us", nil, http.StatusOK)
	if err := json.Unmarshal([]byte(raw), &events); err != nil || len(events) != 0 {
		t.Errorf("pause events of us: %s (%v); want none", raw, err)
	}
	raw = f.expect(mgmtSecret, "GET", "/v1/events?cluster=eu&limit=1", nil, http.StatusOK)
	if err := json.Unmarshal([]byte(raw), &events); err != nil || len(events) != 1 || (events[0].Cluster != "eu" && events[0].Cluster != "") {
		t.Errorf("first event of eu: %s (%v)", raw, err)
	}

	// Every list's JSON carries each item's cluster.
	for _, path := range []string{"/v1/jobs", "/v1/deployments", "/v1/pauses", "/v1/events?kind=pause"} {
		var items []map[string]any
		raw := f.expect(mgmtSecret, "GET", path, nil, http.StatusOK)
		if err := json.Unmarshal([]byte(raw), &items); err != nil || len(items) == 0 {
			t.Fatalf("%s: %s (%v)", path, raw, err)
		}
		for _, it := range items {
			if c, _ := it["cluster"].(string); c != "eu" && c != "us" {
				t.Errorf("%s: item without its cluster: %v", path, it)
			}
		}
	}

	f.expect(mgmtSecret, "POST", "/v1/resume", map[string]string{"reason": "done", "cluster": "us"}, http.StatusNotFound)
	if keys := f.pauseKeys(); len(keys) != 1 || keys[0] != structs.ClusterPauseKey("eu") {
		t.Errorf("resume of us changed eu's pause: %v", keys)
	}
	f.expect(mgmtSecret, "POST", "/v1/resume", map[string]string{"reason": "done", "cluster": "eu"}, http.StatusOK)
	if keys := f.pauseKeys(); len(keys) != 0 {
		t.Errorf("pauses after resume of eu: %v", keys)
	}
}

// TestClusters_StrangeClusterNames: what a caller may put in ?cluster= or
// in the cluster of POST /v1/pause: empty (no cluster: the job's one),
// paths, globs, other cases, spaces, NUL, unicode, a 20 kB name. Every
// one that is no configured cluster is a 400 naming the clusters to a
// token that may act on the job somewhere (and a 403 that names none to a
// token that may not), quotes no more of the name than a cluster's name
// can be long, and changes nothing; a ?cluster= on POST /v1/pause and
// /v1/resume, which take the cluster in their body, is a 400 rather than
// a pause or resume of every job.
func TestClusters_StrangeClusterNames(t *testing.T) {
	f := startClusterFixture(t)
	meta := structs.WriteMeta{Time: time.Now().UTC(), Actor: "test"}
	const nobodySecret = "nobody-secret"
	f.apply(structs.ACLPolicyUpsertRequestType, &structs.ACLPolicyUpsertRequest{WriteMeta: meta, Policy: &structs.ACLPolicy{
		Name: "elsewhere", Rules: "namespace \"other\" {\n  capabilities = [\"read\", \"pause\", \"deploy\"]\n}"}})
	f.apply(structs.ACLTokenUpsertRequestType, &structs.ACLTokenUpsertRequest{WriteMeta: meta, Create: true, Token: &structs.ACLToken{
		AccessorID: "nobody", SecretHash: structs.HashSecret(nobodySecret), Name: "nobody", Type: structs.ACLClientToken,
		Policies: []string{"elsewhere"}}})
	state := func() string {
		counts, err := f.s.State().Counts()
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprintf("%v pauses=%v", counts, f.pauseKeys())
	}
	before := state()
	reason := map[string]string{"reason": "x"}

	// The empty ?cluster= is no cluster: api is eu's alone.
	f.expect(euSecret, "GET", "/v1/job/default/api?cluster=", nil, http.StatusOK)
	f.expect(mgmtSecret, "GET", "/v1/jobs?cluster=", nil, http.StatusOK)

	long := strings.Repeat("e", 20000)
	for _, name := range []string{"../x", "eu/../us", "%2e%2e", "EU", "eu ", " eu", "eu\x00", "ëu", "*", "eu*", "eu,us", long} {
		q := "?cluster=" + url.QueryEscape(name)
		for _, c := range []struct {
			method, path string
			body         any
		}{
			{"GET", "/v1/job/default/api" + q, nil},
			{"POST", "/v1/job/default/api/pause" + q, reason},
			{"POST", "/v1/job/default/api/resume" + q, reason},
			{"POST", "/v1/job/default/api/retry" + q, nil},
			{"POST", "/v1/job/default/api/deploy-now" + q, nil},
			{"GET", "/v1/jobs" + q, nil},
			{"GET", "/v1/deployments" + q, nil},
			{"GET", "/v1/orphans" + q, nil},
			{"GET", "/v1/events" + q, nil},
			{"GET", "/v1/events/stream" + q, nil},
			{"POST", "/v1/pause", map[string]string{"reason": "x", "cluster": name}},
			{"POST", "/v1/resume", map[string]string{"reason": "x", "cluster": name}},
		} {
			for _, secret := range []string{mgmtSecret, euSecret} {
				if secret == euSecret && (c.path == "/v1/pause" || c.path == "/v1/resume") {
					continue // pause on the Nops cluster: a 403 whatever the body
				}
				raw := f.expect(secret, c.method, c.path, c.body, http.StatusBadRequest)
				if !strings.Contains(raw, "the clusters are eu, us") || len(raw) > 400 {
					t.Errorf("%s %.60s: %.200s (%d bytes); want the clusters named in a short answer", c.method, c.path, raw, len(raw))
				}
			}
			if strings.HasPrefix(c.path, "/v1/job/") {
				raw := f.expect(nobodySecret, c.method, c.path, c.body, http.StatusForbidden)
				if strings.Contains(raw, "eu, us") || len(raw) > 400 {
					t.Errorf("%s %.60s without the capability: %.200s (%d bytes); want a short 403 naming no cluster", c.method, c.path, raw, len(raw))
				}
			}
		}
	}

	// ?cluster= on the routes that take the cluster in their body.
	for _, path := range []string{"/v1/pause?cluster=eu", "/v1/resume?cluster=eu", "/v1/pause?cluster="} {
		raw := f.expect(mgmtSecret, "POST", path, reason, http.StatusBadRequest)
		if !strings.Contains(raw, "in the body") {
			t.Errorf("POST %s: %s; want the body asked for", path, raw)
		}
	}
	// Bodies of POST /v1/pause that are not a pause request.
	for _, body := range []string{`{"reason":"x","cluster":5}`, `{"reason":"x","cluster":["eu"]}`, `{"reason":"x","cluster":null,"clusters":"eu"}`,
		`{"reason":"x","cluster":"eu"} {"cluster":"us"}`, `{"reason":"x","cluster":"eu"`, "\x00\xffnot json"} {
		f.expect(mgmtSecret, "POST", "/v1/pause", rawBody(body), http.StatusBadRequest)
	}
	if after := state(); after != before {
		t.Fatalf("refused requests changed the state: %s -> %s", before, after)
	}
}

// TestClusters_EventStreamFiltersByCluster: GET /v1/events/stream?cluster=
// keeps the events of that Nomad cluster and those of no cluster, as the
// event list does; an unknown cluster is a 400 before any event is sent.
func TestClusters_EventStreamFiltersByCluster(t *testing.T) {
	f := startClusterFixture(t)
	f.expect(mgmtSecret, "POST", "/v1/job/default/web/pause?cluster=eu", map[string]string{"reason": "eu only"}, http.StatusOK)
	f.expect(mgmtSecret, "POST", "/v1/job/default/web/pause?cluster=us", map[string]string{"reason": "us only"}, http.StatusOK)
	f.expect(mgmtSecret, "POST", "/v1/pause", map[string]string{"reason": "everything"}, http.StatusOK)
	code, body := f.call(mgmtSecret, "GET", "/v1/events/stream?cluster=mars", nil)
	if code != http.StatusBadRequest || !strings.Contains(body, "mars") {
		t.Fatalf("stream of an unknown cluster: %d %s", code, body)
	}

	api, err := client.New(client.Config{Address: f.s.URL, Token: mgmtSecret})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []*structs.Event
	err = api.Events().Stream(ctx, 0, client.StreamFilter{Kind: structs.EventKindPause, Cluster: "us"}, func(e *structs.Event) error {
		got = append(got, e)
		if e.Cluster == "" {
			// The global pause, the last event written.
			return errStreamDone
		}
		return nil
	})
	if !errors.Is(err, errStreamDone) {
		t.Fatalf("stream: %v (events %d)", err, len(got))
	}
	if len(got) != 2 || got[0].Cluster != "us" || !strings.Contains(got[0].Message, "us only") || got[1].Cluster != "" {
		for _, e := range got {
			t.Logf("streamed: %+v", e)
		}
		t.Fatalf("stream of us: %d events; want us's pause of web, then the global pause", len(got))
	}
}

var errStreamDone = errors.New("seen enough")
