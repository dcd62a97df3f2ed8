package reconcile

import (
	"context"
	"fmt"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
)

// The autoscaler is not a change (SPEC sections 4 and 5). A scale of a task
// group raises the job's modify index like any register, so a waiting or
// approved deployment would see "the live job changed" and be superseded
// or fail at the check-and-set. Before it concludes that, Nops compares the
// live job with the version Nomad registered at the index the deployment
// recorded: when they differ only in the counts of groups with a scaling
// block, the deployment keeps going and its check-and-set index moves to
// the live one (recorded through Raft before any register that uses it).

// autoscaledOnly returns nil when the live job differs from the version the
// deployment recorded at detection only in counts left to an autoscaler. live
// is the job as read now (nil when it is gone). Any other answer, including
// a version Nomad no longer keeps, is a reason to treat it as a change.
func (m *core) autoscaledOnly(ctx context.Context, d *structs.Deployment, live *api.Job) error {
	if d.JobModifyIndex == 0 || live == nil || live.JobModifyIndex == nil {
		return fmt.Errorf("the job was created or removed")
	}
	then, err := m.nomad.JobAtIndex(ctx, d.Namespace, d.JobID, d.JobModifyIndex)
	if err != nil {
		return fmt.Errorf("read the version seen at detection: %w", err)
	}
	if then == nil {
		return fmt.Errorf("Nomad no longer keeps the version seen at detection (modify index %d)", d.JobModifyIndex)
	}
	return nomadx.OnlyScaledCounts(then, live)
}

// autoscaledSince reports whether the live job, at liveMod, differs from
// the version the waiting deployment d recorded only by counts left to an
// autoscaler. It is detection's observation for the rule; the decision to
// rebase is decide's, and the entry act's (rebase). The error is only a
// failure to read the live job.
func (m *Detector) autoscaledSince(ctx context.Context, d *structs.Deployment, liveMod uint64) (bool, error) {
	if d.JobModifyIndex == 0 || liveMod == 0 {
		return false, nil
	}
	live, err := m.liveJob(ctx, d.Namespace, d.JobID)
	if err != nil {
		return false, err
	}
	if live == nil || live.JobModifyIndex == nil || *live.JobModifyIndex != liveMod {
		// Moved again since the list: the next cycle looks again.
		return false, nil
	}
	if why := m.autoscaledOnly(ctx, d, live); why != nil {
		m.logger.Debug("the live job changed by more than autoscaled counts", "deployment", d.ID, "job", d.Key(), "change", why)
		return false, nil
	}
	return true, nil
}

// rebase moves a waiting deployment's check-and-set index to liveMod,
// through Raft, before any register can use it.
func (m *Detector) rebase(d *structs.Deployment, liveMod uint64) error {
	from := d.JobModifyIndex
	err := m.update(d, &structs.DeploymentPatch{JobModifyIndex: &liveMod,
		Message: fmt.Sprintf("only the counts left to an autoscaler changed in Nomad: check-and-set index %d -> %d", from, liveMod)})
	if err != nil {
		return err
	}
	d.JobModifyIndex = liveMod
	return nil
}
