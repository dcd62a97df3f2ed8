package nomadx

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/testutil"
)

// serviceHCL is a mock_driver service job. taskConfig goes into the task's
// config block, update into the update block.
func serviceHCL(id string, count int, taskConfig, update string) string {
	if !strings.Contains(update, "progress_deadline") {
		update += "\n    progress_deadline = \"1m\""
	}
	return fmt.Sprintf(`
job %q {
  datacenters = ["*"]
  type        = "service"

  meta {
    nops_managed = "true"
  }

  update {
    min_healthy_time  = "1s"
    healthy_deadline  = "30s"
    %s
  }
%s
}
`, id, update, groupHCL("app", fmt.Sprintf("count = %d", count), taskConfig))
}

// batchHCL is a mock_driver batch job; extra goes at the job level (for
// example a periodic or parameterized block).
func batchHCL(id, taskConfig, extra string) string {
	return fmt.Sprintf(`
job %q {
  datacenters = ["*"]
  type        = "batch"

  %s
%s
}
`, id, extra, groupHCL("run", "", taskConfig))
}

// groupHCL is a group of one mock_driver task, both named name, whose
// failure is final (no restart, no reschedule); settings go first in the
// group, taskConfig into the task's config block.
func groupHCL(name, settings, taskConfig string) string {
	return fmt.Sprintf(`
  group %q {
    %s

    restart {
      attempts = 0
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

    task %q {
      driver = "mock_driver"

      config {
        %s
      }

      resources {
        cpu    = 10
        memory = 16
      }
    }
  }`, name, settings, name, taskConfig)
}

func newTestClient(t *testing.T, agent *testutil.NomadAgent) *Client {
	t.Helper()
	c, err := New(Config{Address: agent.Addr}, hclog.New(&hclog.LoggerOptions{Name: "nomadx", Level: hclog.Warn}))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func mustParse(t *testing.T, c *Client, hcl, vars string) *api.Job {
	t.Helper()
	job, err := c.Parse(testContext(t), hcl, vars)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return job
}

func mustRegister(t *testing.T, c *Client, job *api.Job, index uint64) *RegisterResult {
	t.Helper()
	res, err := c.Register(testContext(t), job, index)
	if err != nil {
		t.Fatalf("Register(%s, %d): %v", *job.ID, index, err)
	}
	return res
}

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitHealth polls Health until it reports want, failing at once on another
// final state.
func waitHealth(t *testing.T, c *Client, ns, id string, version uint64, evalID string, want HealthState) HealthResult {
	t.Helper()
	ctx := testContext(t)
	var last HealthResult
	testutil.WaitForResult(t, 2*time.Minute, func() (bool, error) {
		res, err := c.Health(ctx, ns, id, version, evalID)
		if err != nil {
			return false, err
		}
		last = res
		if res.State == want {
			return true, nil
		}
		if res.State == HealthFailed || (res.State == HealthHealthy && want != HealthHealthy) {
			t.Fatalf("job %s version %d: health %s (%s), want %s", id, version, res.State, res.Message, want)
		}
		return false, fmt.Errorf("job %s version %d: health %s (%s), want %s", id, version, res.State, res.Message, want)
	})
	return last
}

func waitOutcome(t *testing.T, c *Client, ns, child string, want DispatchOutcome) string {
	t.Helper()
	ctx := testContext(t)
	var msg string
	testutil.WaitForResult(t, 2*time.Minute, func() (bool, error) {
		out, m, err := c.DispatchedOutcome(ctx, ns, child)
		if err != nil {
			return false, err
		}
		msg = m
		if out == want {
			return true, nil
		}
		if out != DispatchPending {
			t.Fatalf("dispatched job %s: outcome %s (%s), want %s", child, out, m, want)
		}
		return false, errors.New("still " + string(out) + ": " + m)
	})
	return msg
}
