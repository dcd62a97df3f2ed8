package nomadx

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/testutil"
)

// TestTokenFile_RotatedWithoutRestart: against a Nomad with ACLs, a client
// reading its token from a file keeps working when the token is revoked and
// the file gets a new one, with no restart, and is refused (with the call
// named) while the file holds a revoked token.
func TestTokenFile_RotatedWithoutRestart(t *testing.T) {
	agent := testutil.StartNomad(t, testutil.WithACL())
	rules := `namespace "default" { capabilities = ["list-jobs", "read-job"] }`
	first := agent.ACLToken(t, "reader", rules, "")
	file := filepath.Join(t.TempDir(), "nomad_token")
	if err := os.WriteFile(file, []byte(first+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NOMAD_TOKEN", "not-this-one")
	c, err := New(Config{Address: agent.Addr, TokenFile: file}, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	if _, err := c.ListJobs(ctx, "default"); err != nil {
		t.Fatalf("list with the first token: %v", err)
	}

	// Revoke it: the refusal names the call.
	self, _, err := agent.Client.ACLTokens().List(nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range self {
		if tok.Name == "reader" {
			if _, err := agent.Client.ACLTokens().Delete(tok.AccessorID, nil); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, err = c.ListJobs(ctx, "default")
	if !IsPermissionDenied(err) || !strings.Contains(err.Error(), "list jobs in namespace") {
		t.Fatalf("list with a revoked token: %v", err)
	}

	// A new token in the file is used at once: the refusal makes the
	// client read the file again and repeat the request.
	second := agent.ACLToken(t, "reader-2", rules, "")
	if err := os.WriteFile(file, []byte(second), 0o600); err != nil {
		t.Fatal(err)
	}
	before := c.Stats()
	if _, err := c.ListJobs(ctx, "default"); err != nil {
		t.Fatalf("list after the rotation: %v", err)
	}
	if d := c.Stats().Sub(before); d.Requests != 1 {
		t.Fatalf("the rotation cost %d counted requests, want 1: %s", d.Requests, d)
	}

	// A register (a request with a body) goes through with the new token
	// too, after another rotation.
	writer := agent.ACLToken(t, "writer", `namespace "default" { capabilities = ["list-jobs", "read-job", "submit-job"] }`, "")
	if err := os.WriteFile(file, []byte(writer), 0o600); err != nil {
		t.Fatal(err)
	}
	job := mustParse(t, c, batchHCL("tokened", `run_for = "1s"`, ""), "")
	if _, err := c.Register(ctx, job, 0); err != nil {
		t.Fatalf("register after the rotation: %v", err)
	}
}

// TestTokenFile_BadFile: a missing, empty or huge token file is an error
// at start that names the file.
func TestTokenFile_BadFile(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	huge := filepath.Join(dir, "huge")
	if err := os.WriteFile(empty, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(huge, []byte(strings.Repeat("x", maxTokenFileSize+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		path string
		want string
	}{
		{filepath.Join(dir, "missing"), "no such file"},
		{empty, ErrNoToken.Error()},
		{huge, "larger than"},
	} {
		_, err := New(Config{Address: "http://127.0.0.1:1", TokenFile: c.path}, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.path) && !errors.Is(err, os.ErrNotExist) {
			t.Errorf("token file %s: error %v, want %q", c.path, err, c.want)
		}
	}
	if _, err := New(Config{Address: "http://127.0.0.1:1", Token: "a", TokenFile: empty}, nil); err == nil {
		t.Error("a token and a token file together were accepted")
	}
}

// TestOnlyScaledCounts: only the counts of groups with a scaling block may
// differ.
func TestOnlyScaledCounts(t *testing.T) {
	job := func(count int, scaled bool, mutate func(*api.Job)) *api.Job {
		name, c := "app", count
		tg := &api.TaskGroup{Name: &name, Count: &c}
		if scaled {
			lo, hi := int64(1), int64(5)
			tg.Scaling = &api.ScalingPolicy{Min: &lo, Max: &hi, ModifyIndex: uint64(count)}
		}
		id, v, idx := "web", uint64(count), uint64(100+count)
		j := &api.Job{ID: &id, Version: &v, JobModifyIndex: &idx, TaskGroups: []*api.TaskGroup{tg}, Meta: map[string]string{"a": "1"}}
		if mutate != nil {
			mutate(j)
		}
		return j
	}
	stop := true
	for _, c := range []struct {
		name          string
		before, after *api.Job
		ok            bool
	}{
		{"scaled count", job(1, true, nil), job(3, true, nil), true},
		{"nothing", job(1, true, nil), job(1, true, nil), true},
		{"count without scaling", job(1, false, nil), job(3, false, nil), false},
		{"meta", job(1, true, nil), job(3, true, func(j *api.Job) { j.Meta["a"] = "2" }), false},
		{"stopped", job(1, true, nil), job(1, true, func(j *api.Job) { j.Stop = &stop }), false},
		{"scaling removed", job(1, true, nil), job(1, false, nil), false},
		{"scaling max", job(1, true, nil), job(1, true, func(j *api.Job) { hi := int64(9); j.TaskGroups[0].Scaling.Max = &hi }), false},
		{"missing", job(1, true, nil), nil, false},
	} {
		err := OnlyScaledCounts(c.before, c.after)
		if (err == nil) != c.ok {
			t.Errorf("%s: OnlyScaledCounts = %v, want ok=%v", c.name, err, c.ok)
		}
	}
}
