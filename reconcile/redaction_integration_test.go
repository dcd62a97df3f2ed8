package reconcile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// secretJobHCL is a managed job that carries secrets in a task env entry, in
// template data and in a meta key that looks secret. suffix changes every
// secret (and so the job).
func secretJobHCL(suffix string) string {
	hcl := testutil.ServiceJobHCL("web", managed(structs.PolicyAuto,
		testutil.WithEnv("DB_PASSWORD", "hunter2-secret"+suffix),
		testutil.WithMeta("api_token", "tok-meta-secret"+suffix))...)
	tmpl := "      template {\n" +
		"        data        = \"dsn=postgres://app:tmpl-data-secret" + suffix + "@db/app\"\n" +
		"        destination = \"local/app.env\"\n" +
		"      }\n\n"
	return strings.Replace(hcl, "      resources {", tmpl+"      resources {", 1)
}

// TestRedaction_SecretsNeverLeave: secrets of a job's env, template data and
// secret-looking meta never reach the API (deployments, events, jobs) nor
// the server's logs, on a new job and on a change of the secrets.
func TestRedaction_SecretsNeverLeave(t *testing.T) {
	t.Parallel()
	e := lcWorld(t, map[string]string{jobFile("web"): secretJobHCL("")})

	// A server like nopstest's, with its logs in a buffer at Debug level.
	var logs testutil.SyncBuffer
	logger := hclog.New(&hclog.LoggerOptions{Name: "nops", Level: hclog.Debug, Output: &logs})
	cfg := nopstest.Config(t, t.TempDir())
	cfg.NomadAddr = e.nomad.Addr
	cfg.Repositories = append(cfg.Repositories, config.Repository{Name: "main", URL: e.repo.URL(), Branch: "main",
		Path: lcRepoPath, PollInterval: 200 * time.Millisecond})
	srv, err := agent.New(cfg, logger, agent.ReconcileOptions(cfg, logger, nil))
	if err != nil {
		t.Fatalf("start nops server: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	base := "http://" + srv.HTTPAddr()
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		return srv.IsLeader(), fmt.Errorf("server is not the leader yet")
	})

	waitCompleted := func(n int) *structs.Deployment {
		t.Helper()
		var newest *structs.Deployment
		testutil.WaitForResult(t, lcWait, func() (bool, error) {
			var list []*structs.Deployment
			if err := getJSON(base+"/v1/deployments?job=web", &list); err != nil {
				return false, err
			}
			if len(list) != n || list[0].State != structs.StateCompleted {
				return false, fmt.Errorf("%d deployments of web, want %d with the newest completed", len(list), n)
			}
			newest = list[0]
			return true, nil
		})
		return newest
	}

	check := func(d *structs.Deployment, keys []string, secrets ...string) {
		t.Helper()
		// The diff is there, with its keys and without their values.
		if len(keys) > 0 && !strings.Contains(d.Diff, "(redacted)") {
			t.Fatalf("the stored diff redacts nothing:\n%s", d.Diff)
		}
		for _, want := range keys {
			if !strings.Contains(d.Diff, want) {
				t.Fatalf("the stored diff does not show %s at all:\n%s", want, d.Diff)
			}
		}
		for _, path := range []string{
			"/v1/deployment/" + d.ID, "/v1/deployment/" + d.ID + "/events", "/v1/deployments", "/v1/events",
			"/v1/jobs", "/v1/job/default/web", "/v1/repos",
		} {
			body, err := getRaw(base + path)
			if err != nil {
				t.Fatalf("GET %s: %v", path, err)
			}
			for _, s := range secrets {
				if strings.Contains(body, s) {
					t.Fatalf("GET %s shows the secret %q:\n%s", path, s, body)
				}
			}
		}
		out := logs.String()
		if !strings.Contains(out, "deployment created") {
			t.Fatalf("the server logged no deployment at Debug level:\n%s", out)
		}
		for _, s := range secrets {
			if strings.Contains(out, s) {
				t.Fatalf("the server logs show the secret %q", s)
			}
		}
	}

	first := waitCompleted(1)
	// A new job's diff names no field.
	check(first, nil, "hunter2-secret", "tok-meta-secret", "tmpl-data-secret")
	// Nomad does have them: the test planted real secrets.
	j := e.nomadJob("web")
	if j.Meta["api_token"] != "tok-meta-secret" || j.TaskGroups[0].Tasks[0].Env["DB_PASSWORD"] != "hunter2-secret" ||
		!strings.Contains(*j.TaskGroups[0].Tasks[0].Templates[0].EmbeddedTmpl, "tmpl-data-secret") {
		t.Fatalf("Nomad job does not carry the planted secrets: meta %v", j.Meta)
	}

	// New values: the diff holds old and new, both redacted.
	e.commit("rotate", map[string]string{jobFile("web"): secretJobHCL("-rotated")})
	second := waitCompleted(2)
	t.Logf("rotation diff (redacted):\n%s", second.Diff)
	if second.JobVersion != 1 {
		t.Fatalf("rotation deployment: %+v", second)
	}
	check(second, []string{"DB_PASSWORD", "api_token", "EmbeddedTmpl"}, "hunter2-secret", "tok-meta-secret", "tmpl-data-secret")
}

func getRaw(url string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("status %d: %s", resp.StatusCode, raw)
	}
	return string(raw), nil
}

func getJSON(url string, out any) error {
	raw, err := getRaw(url)
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(raw), out)
}
