package fsm

import (
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
)

// TestCreateFailWith: a deployment whose hook is missing is created and
// failed in one entry, so no step can start it in between; it leaves a
// block and both events.
func TestCreateFailWith(t *testing.T) {
	h := newHarness(t)
	d := testDeployment("d-hook", "default", "web", 1, 0)
	h.mustApply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{
		WriteMeta: h.meta("nops"), Deployment: d, FailWith: `pre hook "backup" is not declared by any file in namespace default`,
	})
	got := h.deployment("d-hook")
	if got.State != structs.StateFailed || got.Error != `pre hook "backup" is not declared by any file in namespace default` {
		t.Fatalf("deployment: state %s error %q", got.State, got.Error)
	}
	if got.CreateIndex != got.ModifyIndex {
		t.Fatalf("created at %d but failed at %d: not one entry", got.CreateIndex, got.ModifyIndex)
	}
	b, err := h.state().Block("", "default", "web")
	if err != nil || b == nil || b.DeploymentID != "d-hook" || b.AfterRegister {
		t.Fatalf("block: %+v %v", b, err)
	}
	events := h.events()
	if len(events) != 2 || events[0].To != string(structs.StateDetected) ||
		events[1].From != string(structs.StateDetected) || events[1].To != string(structs.StateFailed) {
		t.Fatalf("events: %+v", events)
	}
	if a, _ := h.state().ActiveDeployment("", "default", "web"); a != nil {
		t.Fatalf("a failed deployment is active: %+v", a)
	}
}

// TestCreateCommitContext: a deployment keeps the commit context it is
// created with, and one whose texts are over their bounds is refused
// whole, as ErrInvalid, before anything is written.
func TestCreateCommitContext(t *testing.T) {
	h := newHarness(t)
	d := testDeployment("d-ctx", "default", "web", 0, 0)
	d.CommitMessage, d.CommitAuthor = "Bump web to v2\n\nbody", "Ops <ops@example.com>"
	d.CommitTime = time.Date(2025, 3, 1, 8, 0, 0, 0, time.UTC)
	d.CommitURL = "https://git.example.com/ops/jobs/commit/" + d.Commit
	d.FileDiff = structs.CapFileDiff(strings.Repeat("+line\n", structs.MaxFileDiffLen))
	h.create(d)
	got := h.deployment("d-ctx")
	if got.CommitSubject() != "Bump web to v2" || got.CommitAuthor != d.CommitAuthor || !got.CommitTime.Equal(d.CommitTime) ||
		got.CommitURL != d.CommitURL || got.FileDiff != d.FileDiff {
		t.Fatalf("stored commit context: %q %q %v %q (%d bytes of diff)", got.CommitMessage, got.CommitAuthor, got.CommitTime, got.CommitURL, len(got.FileDiff))
	}
	for name, change := range map[string]func(*structs.Deployment){
		"file_diff":      func(d *structs.Deployment) { d.FileDiff = strings.Repeat("+x\n", structs.MaxFileDiffLen/3+1) },
		"commit_message": func(d *structs.Deployment) { d.CommitMessage = strings.Repeat("m", structs.MaxTextLen+1) },
		"commit_author":  func(d *structs.Deployment) { d.CommitAuthor = strings.Repeat("a", structs.MaxTextLen+1) },
		"commit_url":     func(d *structs.Deployment) { d.CommitURL = strings.Repeat("u", structs.MaxTextLen+1) },
	} {
		over := testDeployment("d-"+name, "default", "api-"+name, 0, 0)
		change(over)
		h.refused(structs.ErrInvalid, []string{name, "at most"}, func() error {
			return h.apply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: h.meta("nops"), Deployment: over})
		})
		if got, _ := h.state().Deployment(over.ID); got != nil {
			t.Errorf("%s: a refused deployment was stored", name)
		}
	}
}
