package reconcile_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// preview asks for a preview through the API and returns the status code,
// the answer and the raw body.
func (e *lcEnv) preview(repo, ref string) (int, *structs.Preview, string) {
	e.t.Helper()
	var p structs.Preview
	code, body := e.s.Do("POST", "/v1/preview", &structs.PreviewRequest{Repository: repo, Ref: ref}, &p)
	return code, &p, body
}

// mustPreview asks for a preview and fails the test unless it answers 200.
func (e *lcEnv) mustPreview(ref string) *structs.Preview {
	e.t.Helper()
	code, p, body := e.preview("main", ref)
	if code != http.StatusOK {
		e.t.Fatalf("POST /v1/preview main@%s: %d %s", ref, code, body)
	}
	return p
}

// previewKeys returns the keys and changes of jobs, as "key:change".
func previewKeys(jobs []*structs.PreviewJob) string {
	var out []string
	for _, j := range jobs {
		out = append(out, structs.JobKey("", j.Namespace, j.JobID)+":"+j.Change)
	}
	return strings.Join(out, ",")
}

// TestPreview_RefChangesAddsRemoves: with a, b and c deployed, a branch
// that changes b (with a planted secret), adds d (which depends on b) and
// e (which depends on a missing job) and a broken file, and removes c,
// previews as exactly those, with a redacted plan diff and file diff, d
// waiting for b, e's dependency problem and the broken file; the same commit
// named by a lightweight tag, an annotated tag and its hash previews the
// same; the followed branch previews as no change. No preview moves the
// Raft index or a Nomad job version, nor registers d. An unknown ref or
// repository is a 404 naming it, a paused job shows its hold, a second
// preview while one runs is a 409, a ref with more job files than the
// limit is a 400 that plans nothing, and one over its timeout a 502.
func TestPreview_RefChangesAddsRemoves(t *testing.T) {
	t.Parallel()
	const secret = "s3cret-planted"
	job := func(id string, more ...testutil.JobOption) string {
		return testutil.ServiceJobHCL(id, managed(structs.PolicyAuto, more...)...)
	}
	e := lcStart(t, map[string]string{jobFile("a"): job("a"), jobFile("b"): job("b"), jobFile("c"): job("c")})
	for _, id := range []string{"a", "b", "c"} {
		e.s.WaitForDeployment("default", id, structs.StateCompleted, lcWait)
	}
	for _, id := range []string{"a", "b", "c"} {
		e.s.WaitForJobStatus("default", id, lcWait, func(s *structs.JobStatus) bool { return s.Sync == structs.SyncInSync })
	}
	e.settle()

	e.repo.Git("checkout", "-b", "feature")
	feature := e.commit("change b, add d and e, remove c", map[string]string{
		jobFile("b"):                  job("b", testutil.WithCount(2), testutil.WithEnv("DB_PASSWORD", secret)),
		jobFile("d"):                  job("d", testutil.WithMeta("nops_depends_on", "b")),
		jobFile("e"):                  job("e", testutil.WithMeta("nops_depends_on", "missing")),
		jobsDir + "/broken.nomad.hcl": "job \"broken\" {",
	}, jobFile("c"))
	e.repo.Git("tag", "v1")
	e.repo.Git("tag", "-a", "v1-annotated", "-m", "release v1")
	e.repo.Git("checkout", "main")

	versions := map[string]int{}
	for _, id := range []string{"a", "b", "c"} {
		versions[id] = len(e.nomadVersions(id))
	}
	index := e.s.State().LatestIndex()

	for _, ref := range []string{"feature", "v1", "v1-annotated", feature} {
		p := e.mustPreview(ref)
		if p.Commit != feature || p.Ref != ref || p.Branch != "main" || p.BranchCommit != e.repoStatus().Head || !p.Changes {
			t.Fatalf("preview of %s: commit %s ref %s branch %s at %s changes %v, want commit %s against main", ref,
				p.Commit, p.Ref, p.Branch, p.BranchCommit, p.Changes, feature)
		}
		if got := previewKeys(p.Jobs); got != "default/b:changed,default/d:added,default/e:added" {
			t.Fatalf("preview of %s: jobs %s, want b changed, d and e added", ref, got)
		}
		if len(p.Errors) != 1 || !strings.HasPrefix(p.Errors[0], "jobs/broken.nomad.hcl: ") {
			t.Fatalf("preview of %s: file errors %q, want broken.nomad.hcl's", ref, p.Errors)
		}
		if got := previewKeys(p.Removed); got != "default/c:removed" {
			t.Fatalf("preview of %s: removed %s, want c", ref, got)
		}
		b, d, ej := p.Jobs[0], p.Jobs[1], p.Jobs[2]
		// d depends on b, which changes too: it waits for b. e depends on
		// a job no file declares: a validation error.
		if !strings.Contains(d.WaitingFor, "waiting for default/b") || d.Hold != "" || d.Blocked != "" || len(d.Errors) > 0 {
			t.Fatalf("preview of %s: d, which depends on b: %+v", ref, d)
		}
		if len(ej.Errors) != 1 || !strings.Contains(ej.Errors[0], "missing") {
			t.Fatalf("preview of %s: e, which depends on a missing job: errors %q", ref, ej.Errors)
		}
		if b.PlanType != "Edited" || !strings.Contains(b.Diff, "Count") || b.Policy != structs.PolicyAuto {
			t.Fatalf("preview of %s: b plans %s, policy %s, diff:\n%s", ref, b.PlanType, b.Policy, b.Diff)
		}
		mustHave(t, "b's file diff", b.FileDiff, "--- a/jobs/b.nomad.hcl", "+++ b/jobs/b.nomad.hcl", "+", "DB_PASSWORD")
		if d.PlanType != "Added" || d.Diff == "" || !strings.Contains(d.FileDiff, "+++ b/jobs/d.nomad.hcl") {
			t.Fatalf("preview of %s: d plans %s, diff %q, file diff:\n%s", ref, d.PlanType, d.Diff, d.FileDiff)
		}
		if !strings.Contains(p.Removed[0].FileDiff, "--- a/jobs/c.nomad.hcl") {
			t.Fatalf("preview of %s: c's file diff:\n%s", ref, p.Removed[0].FileDiff)
		}
		for _, j := range append(p.Jobs, p.Removed...) {
			if strings.Contains(j.Diff+j.FileDiff, secret) {
				t.Fatalf("preview of %s: the secret shows in %s's diffs:\n%s\n%s", ref, j.JobID, j.Diff, j.FileDiff)
			}
		}
		if b.Hold != "" || b.Blocked != "" || b.WaitingFor != "" || len(b.Errors) > 0 {
			t.Fatalf("preview of %s: b is stopped: %+v", ref, b)
		}
	}
	if p := e.mustPreview("main"); p.Changes || len(p.Jobs) != 0 || len(p.Removed) != 0 {
		t.Fatalf("preview of the followed branch: %+v, want no change", p)
	}
	for ref, want := range map[string]string{"no-such-branch": `has no branch or tag \"no-such-branch\"`, strings.Repeat("ab", 20): "gives no commit"} {
		if code, _, body := e.preview("main", ref); code != http.StatusNotFound || !strings.Contains(body, want) {
			t.Fatalf("preview of unknown ref %s: %d %s, want 404 saying %s", ref, code, body, want)
		}
	}
	if code, _, body := e.preview("nope", "main"); code != http.StatusNotFound || !strings.Contains(body, `repository \"nope\" is not watched`) {
		t.Fatalf("preview of an unknown repository: %d %s", code, body)
	}
	if code, _, body := e.preview("main", ""); code != http.StatusBadRequest {
		t.Fatalf("preview without a ref: %d %s, want 400", code, body)
	}

	// Bounds: one at a time, and a limit on the jobs planned.
	m := e.s.Manager()
	release, ok := m.HoldPreview()
	if !ok {
		t.Fatal("a preview is running though none was asked for")
	}
	code, _, body := e.preview("main", "feature")
	release()
	if code != http.StatusConflict || !strings.Contains(body, "another preview is running") {
		t.Fatalf("a second preview while one runs: %d %s, want 409", code, body)
	}
	m.SetPreviewLimits(2, 0)
	code, _, body = e.preview("main", "feature")
	m.SetPreviewLimits(0, 0)
	if code != http.StatusBadRequest || !strings.Contains(body, "holds 5 job files, more than a preview plans (2)") {
		t.Fatalf("a preview over the job limit: %d %s, want 400", code, body)
	}
	m.SetPreviewLimits(0, time.Nanosecond)
	code, _, body = e.preview("main", "feature")
	m.SetPreviewLimits(0, 0)
	if code != http.StatusBadGateway || !strings.Contains(body, "took longer than 1ns and was stopped") {
		t.Fatalf("a preview over its timeout: %d %s, want 502", code, body)
	}
	// Concurrent previews: each answers 200 or the 409 of the bound.
	var wg sync.WaitGroup
	codes := make([]int, 3)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _, _ = e.preview("main", "feature")
		}()
	}
	wg.Wait()
	for _, c := range codes {
		if c != http.StatusOK && c != http.StatusConflict {
			t.Fatalf("concurrent previews answered %v, want 200 or 409 each", codes)
		}
	}

	// Nothing was written or registered.
	if got := e.s.State().LatestIndex(); got != index {
		t.Fatalf("the previews moved the Raft index from %d to %d", index, got)
	}
	for id, n := range versions {
		if got := len(e.nomadVersions(id)); got != n {
			t.Fatalf("Nomad keeps %d versions of %s after the previews, want %d", got, id, n)
		}
	}
	if lookupNomadJob(t, e.nomad, "d") != nil {
		t.Fatal("a preview registered job d")
	}

	// A paused job shows its hold.
	e.post("/v1/job/default/b/pause", map[string]string{"reason": "freeze"})
	p := e.mustPreview("feature")
	if p.Jobs[0].JobID != "b" || !strings.Contains(p.Jobs[0].Hold, "pause") {
		t.Fatalf("preview of a paused b: %+v", p.Jobs[0])
	}
}

// mustHave fails the test unless text holds every one of want.
func mustHave(t *testing.T, what, text string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Fatalf("%s lacks %q:\n%s", what, w, text)
		}
	}
}

// TestPreview_FollowerForwardsToLeader: a preview asked of a follower runs
// on the leader, which holds the git clones: while the leader's one
// preview is held, the follower answers the leader's 409 (its own bound is
// free); once released, the follower answers the leader's preview, and no
// server's Raft index moved.
func TestPreview_FollowerForwardsToLeader(t *testing.T) {
	t.Parallel()
	nomad, repo := startWorld(t, map[string]string{jobFile("web"): testutil.ServiceJobHCL("web", managed(structs.PolicyApproval)...)})
	repo.Git("checkout", "-b", "feature")
	feature := commitFiles(repo, "two of web", map[string]string{
		jobFile("web"): testutil.ServiceJobHCL("web", managed(structs.PolicyApproval, testutil.WithCount(2))...)})
	repo.Git("checkout", "main")
	c := nopstest.StartCluster(t, 3, serverOptions(nomad, repo.URL())...)
	leader := c.WaitForLeader(30 * time.Second)
	follower := c.Followers()[0]
	// The cluster settles: web's deployment waits for approval, and its
	// status is recorded.
	leader.WaitForDeployment("default", "web", structs.StatePendingApproval, lcWait)
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		var list []*structs.RepoStatus
		if code, body := follower.Do("GET", "/v1/repos", nil, &list); code != http.StatusOK || len(list) != 1 || list[0].Head == "" {
			return false, fmt.Errorf("repositories on the follower: %d %s", code, body)
		}
		if s := follower.JobStatus("default", "web"); s == nil {
			return false, fmt.Errorf("web has no status on the follower yet")
		}
		return true, nil
	})
	// Then no write for a second: what the cluster's start proposes is in.
	testutil.WaitForResult(t, lcWait, func() (bool, error) {
		idx := leader.State().LatestIndex()
		time.Sleep(time.Second)
		return leader.State().LatestIndex() == idx, fmt.Errorf("the leader's Raft index still moves")
	})
	ask := func() (int, *structs.Preview, string) {
		var p structs.Preview
		code, body := follower.Do("POST", "/v1/preview", &structs.PreviewRequest{Repository: "main", Ref: "feature"}, &p)
		return code, &p, body
	}

	release, ok := leader.Manager().HoldPreview()
	if !ok {
		t.Fatal("a preview is running on the leader though none was asked for")
	}
	code, _, body := ask()
	release()
	if code != http.StatusConflict || !strings.Contains(body, "another preview is running") {
		t.Fatalf("a preview asked of a follower while the leader's runs: %d %s, want the leader's 409", code, body)
	}
	before := map[*nopstest.Server]uint64{}
	for _, s := range c.Servers() {
		before[s] = s.State().LatestIndex()
	}
	code, p, body := ask()
	if code != http.StatusOK || p.Commit != feature || previewKeys(p.Jobs) != "default/web:changed" || p.Jobs[0].PlanType == "" {
		t.Fatalf("a preview asked of a follower: %d %s", code, body)
	}
	for s, idx := range before {
		if got := s.State().LatestIndex(); got != idx {
			t.Fatalf("the preview moved the Raft index of a server from %d to %d", idx, got)
		}
	}
}
