package fsm

import (
	"errors"
	"fmt"
	"reflect"
	"time"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/meta"
)

// ErrBadSnapshot wraps every reason a snapshot's state is refused.
var ErrBadSnapshot = errors.New("invalid snapshot state")

// validateState checks a restored state, inside the transaction that wrote
// it and before it is committed, against the rules the FSM enforces on
// every entry: a state that no sequence of entries could have built is
// refused, so that a snapshot cannot bring in what the log never could. counts
// is the number of records read per table; a table with fewer rows held a
// record twice. The events were checked one by one as they were read (see
// decodeEventRecord); lastSeq, the last one's sequence number, is checked
// against the counters here.
func validateState(txn *memdb.Txn, counts map[string]int, lastSeq uint64) error {
	for table, n := range counts {
		rows, err := countRows(txn, table)
		if err != nil {
			return err
		}
		if rows != n {
			return fmt.Errorf("%w: %s holds %d records for %d objects: a record is repeated", ErrBadSnapshot, table, n, rows)
		}
	}
	if n := counts[TableWebhookDeliveries]; n > structs.MaxWebhookDeliveries {
		return fmt.Errorf("%w: %s holds %d deliveries, over the %d a server keeps", ErrBadSnapshot, TableWebhookDeliveries, n, structs.MaxWebhookDeliveries)
	}
	meta := readMeta(txn)
	if raw, err := txn.First(TableMeta, "id", metaKey); err != nil {
		return fmt.Errorf("%w: counters: %w", ErrBadSnapshot, err)
	} else if raw == nil && counts[TableMeta] > 0 {
		return fmt.Errorf("%w: the counters record has the wrong key", ErrBadSnapshot)
	}
	if lastSeq > meta.EventSeq {
		return fmt.Errorf("%w: %s: %w", ErrBadSnapshot, TableEvents,
			invalid("event sequence %d is outside 1..%d, the last one the counters record", lastSeq, meta.EventSeq))
	}
	if counts[TableCycle] > 0 {
		rows, err := list[cycleRow](txn, TableCycle)
		if err != nil {
			return fmt.Errorf("%w: detection cycle records: %w", ErrBadSnapshot, err)
		}
		for _, r := range rows {
			if r.Cycle == nil || r.Key != cycleRowKey(r.Cycle.Cluster) {
				return fmt.Errorf("%w: the detection cycle record has the wrong key or no cycle", ErrBadSnapshot)
			}
		}
	}
	checks := []struct {
		table string
		check func(obj any) error
	}{
		{TableDeployments, func(obj any) error { return validDeployment(obj.(*structs.Deployment)) }},
		{TableWindows, func(obj any) error { return validWindow(obj.(*structs.SyncWindow)) }},
		{TablePauses, func(obj any) error { return validPause(obj.(*structs.Pause)) }},
		{TableLifts, func(obj any) error {
			l := obj.(*structs.WindowLift)
			return needJob("deploy-now request", l.Namespace, l.JobID)
		}},
		{TableBlocks, func(obj any) error {
			b := obj.(*structs.Block)
			return needJob("block", b.Namespace, b.JobID)
		}},
		{TableJobStatus, func(obj any) error {
			s := obj.(*structs.JobStatus)
			return needJob("job status", s.Namespace, s.JobID)
		}},
		{TableRepoStatus, func(obj any) error {
			if obj.(*structs.RepoStatus).Name == "" {
				return invalid("a repository status needs a name")
			}
			return nil
		}},
		{TableWebhookDeliveries, func(obj any) error { return validWebhookDelivery(obj.(*structs.WebhookDelivery)) }},
	}
	active := map[string]string{}
	for _, c := range checks {
		it, err := txn.Get(c.table, "id")
		if err != nil {
			return fmt.Errorf("%w: read %s: %w", ErrBadSnapshot, c.table, err)
		}
		for raw := it.Next(); raw != nil; raw = it.Next() {
			if err := c.check(raw); err != nil {
				return fmt.Errorf("%w: %s: %w", ErrBadSnapshot, c.table, err)
			}
			d, ok := raw.(*structs.Deployment)
			if !ok || !d.State.Active() {
				continue
			}
			if other, dup := active[d.Key()]; dup {
				return fmt.Errorf("%w: job %s has two active deployments, %s and %s: at most one is allowed",
					ErrBadSnapshot, d.Key(), other, d.ID)
			}
			active[d.Key()] = d.ID
		}
	}
	return nil
}

func countRows(txn *memdb.Txn, table string) (int, error) {
	it, err := txn.Get(table, "id")
	if err != nil {
		return 0, fmt.Errorf("%w: read %s: %w", ErrBadSnapshot, table, err)
	}
	n := 0
	for raw := it.Next(); raw != nil; raw = it.Next() {
		n++
	}
	return n, nil
}

// validDeployment checks what the FSM checks of a deployment it stores.
func validDeployment(d *structs.Deployment) error {
	if d.ID == "" || d.Namespace == "" || d.JobID == "" {
		return invalid("a deployment needs an ID, a namespace and a job ID")
	}
	if d.CreatedAt.IsZero() {
		return invalid("deployment %s has no creation time: the leader stamps every deployment", d.ID)
	}
	if !d.State.Valid() {
		return invalid("deployment %s is in state %q, which is not a deployment state", d.ID, d.State)
	}
	if err := validApprovalRules(d); err != nil {
		return err
	}
	for _, h := range d.Hooks {
		if err := validHookPhase(d.ID, h); err != nil {
			return err
		}
	}
	for _, r := range d.HookRuns {
		if err := validHookRun(d.ID, r); err != nil {
			return err
		}
	}
	for _, dec := range d.Decisions {
		if err := structs.CheckText("deployment "+d.ID+": comment", dec.Comment); err != nil {
			return err
		}
	}
	return validCommitContext(d)
}

// validCommitContext checks the bounds of a deployment's commit context,
// as deploymentCreate does: the texts read from git are cut to them at
// detection, and nothing longer is stored.
func validCommitContext(d *structs.Deployment) error {
	for _, f := range []struct{ name, value string }{
		{"commit_message", d.CommitMessage}, {"commit_author", d.CommitAuthor}, {"commit_committer", d.CommitCommitter},
		{"commit_url", d.CommitURL}, {"commit_signer", d.CommitSigner},
	} {
		if err := structs.CheckText("deployment "+d.ID+": "+f.name, f.value); err != nil {
			return err
		}
	}
	if err := structs.CheckFileDiff("deployment "+d.ID+": file_diff", d.FileDiff); err != nil {
		return err
	}
	// A deeper tree could not be read back from a snapshot.
	if n := d.PlanDiff.Depth(); n > structs.MaxDiffDepth {
		return invalid("deployment %s: plan_diff nests %d blocks deep, at most %d", d.ID, n, structs.MaxDiffDepth)
	}
	return nil
}

// validApprovalRules checks the approval rules a deployment was detected
// with, as deploymentCreate does.
func validApprovalRules(d *structs.Deployment) error {
	if d.ApprovalsRequired < 0 || d.ApprovalTTL < 0 {
		return invalid("deployment %s needs %d approvals within %s: neither may be negative", d.ID, d.ApprovalsRequired, d.ApprovalTTL)
	}
	if d.ApprovalsRequired > meta.MaxApprovals {
		return invalid("deployment %s needs %d approvals, at most %d", d.ID, d.ApprovalsRequired, meta.MaxApprovals)
	}
	return nil
}

// validHookPhase checks a frozen hook's phase, as deploymentCreate does.
func validHookPhase(id string, h structs.FrozenHook) error {
	if h.Phase != structs.PhasePre && h.Phase != structs.PhasePost {
		return invalid("deployment %s: hook %q has phase %q, not pre or post", id, h.Name, h.Phase)
	}
	return nil
}

// validHookRun checks a hook run's phase and state, as a patch does.
func validHookRun(id string, r structs.HookRun) error {
	if r.Phase != structs.PhasePre && r.Phase != structs.PhasePost {
		return invalid("deployment %s: hook run %q has phase %q, not pre or post", id, r.Hook, r.Phase)
	}
	switch r.State {
	case structs.HookRunDispatching, structs.HookRunRunning, structs.HookRunSucceeded, structs.HookRunFailed:
		return nil
	}
	return invalid("deployment %s: hook run %q is in state %q", id, r.Hook, r.State)
}

// validWindow checks a sync window as windowUpsert does.
func validWindow(win *structs.SyncWindow) error {
	if win == nil || win.Name == "" {
		return invalid("a sync window needs a name")
	}
	if win.Kind != structs.WindowAllow && win.Kind != structs.WindowDeny {
		return invalid("window %s: kind must be allow or deny, not %q", win.Name, win.Kind)
	}
	return nil
}

// validPause checks a stored pause is keyed as pause writes it.
func validPause(p *structs.Pause) error {
	req := structs.PauseRequest{Global: p.Global, Cluster: p.Cluster, Namespace: p.Namespace, JobID: p.JobID}
	switch {
	case p.Global:
	case p.JobID == "" && p.Cluster != "":
		// The pause of every job of a cluster.
	default:
		if err := needJob("job pause", p.Namespace, p.JobID); err != nil {
			return err
		}
	}
	if p.Key != req.Key() {
		return invalid("pause key %q does not match its job %q", p.Key, req.Key())
	}
	return structs.CheckText("pause "+p.Key+": reason", p.Reason)
}

func needJob(what, namespace, jobID string) error {
	if namespace == "" || jobID == "" {
		return invalid("a %s needs a namespace and a job ID", what)
	}
	return nil
}

var anyTimeType = reflect.TypeOf(time.Time{})

// checkTimes refuses a time that JSON cannot write (a year outside 0 to
// 9999, a zone offset of a day or more), anywhere in v: the leader stamps real times, and a stored time
// the API cannot show would break every answer that holds it.
func checkTimes(v reflect.Value) error {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return checkTimes(v.Elem())
	case reflect.Struct:
		if v.Type() == anyTimeType {
			t := v.Interface().(time.Time)
			if _, err := t.MarshalJSON(); err != nil {
				return invalid("a time the API cannot write: %v", err)
			}
			return nil
		}
		for i := 0; i < v.NumField(); i++ {
			if err := checkTimes(v.Field(i)); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return nil
		}
		for i := 0; i < v.Len(); i++ {
			if err := checkTimes(v.Index(i)); err != nil {
				return err
			}
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			if err := checkTimes(it.Value()); err != nil {
				return err
			}
		}
	}
	return nil
}

// checkTime refuses a time that JSON cannot write, as checkTimes does,
// without its reflection and, for a time that passes, without allocating.
func checkTime(t time.Time) error {
	if y := t.Year(); y >= 0 && y <= 9999 {
		if _, off := t.Zone(); off > -24*3600 && off < 24*3600 {
			return nil
		}
	}
	var buf [64]byte
	if _, err := t.AppendText(buf[:0]); err != nil {
		return invalid("a time the API cannot write: %v", err)
	}
	return nil
}

// checkDeploymentTimes is checkTimes for a deployment.
func checkDeploymentTimes(d *structs.Deployment) error {
	for _, t := range []time.Time{d.RegisterStartedAt, d.HealthDeadline, d.CreatedAt, d.UpdatedAt, d.StateEnteredAt} {
		if err := checkTime(t); err != nil {
			return err
		}
	}
	for i := range d.HookRuns {
		if err := checkTime(d.HookRuns[i].StartedAt); err != nil {
			return err
		}
		if err := checkTime(d.HookRuns[i].FinishedAt); err != nil {
			return err
		}
	}
	for i := range d.Decisions {
		if err := checkTime(d.Decisions[i].Time); err != nil {
			return err
		}
	}
	return nil
}
