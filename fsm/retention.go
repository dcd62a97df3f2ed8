package fsm

import (
	"fmt"
	"slices"

	memdb "github.com/hashicorp/go-memdb"

	"github.com/nops-dev/nops/structs"
)

// Retention (garbage collection). The leader proposes cut-off times; this
// file decides what goes, from the state alone, so every server removes the
// same records. What retention never removes:
//
//   - an active deployment (nor its spec);
//   - the newest deployment of a job, and the KeepPerJob newest;
//   - the deployment a block names (nor its spec), and blocks and deploy-now
//     requests themselves;
//   - an event at or after the first event whose time is at or after the
//     cut-off: events go oldest first, so the log stays a suffix of itself
//     and every reader's cursor stays valid.

// maxGCPerEntry bounds the MaxDeployments and MaxEvents of one request:
// the leader asks for thousands, and a bigger entry would hold every
// server's apply for seconds.
const maxGCPerEntry = 100_000

// gcWriter applies the retention requests through the entry's writer.
type gcWriter struct{ *writer }

func (w gcWriter) gc(req *structs.GCRequest) error {
	if req.KeepPerJob < 1 {
		return invalid("retention keeps at least the newest deployment of each job, not %d", req.KeepPerJob)
	}
	for _, b := range []struct {
		name string
		v    int
	}{{"deployments changed", req.MaxDeployments}, {"deployments read", req.MaxScan}, {"events deleted", req.MaxEvents}} {
		if b.v < 1 || b.v > maxGCPerEntry {
			return invalid("a retention entry bounds the %s to 1..%d, not %d", b.name, maxGCPerEntry, b.v)
		}
	}
	res := &structs.GCResult{Index: w.index}
	if err := w.gcDeployments(req, res); err != nil {
		return err
	}
	if err := w.gcEvents(req, res); err != nil {
		return err
	}
	if err := webhookWriter(w).gcWebhookDeliveries(req.WebhookDeliveriesBefore, res); err != nil {
		return err
	}
	w.resp = res
	return nil
}

// gcDeployments drops specs and deletes deployments, job by job in the
// order of the job index, newest first within a job.
func (w gcWriter) gcDeployments(req *structs.GCRequest, res *structs.GCResult) error {
	if req.SpecBefore.IsZero() && req.DeploymentsBefore.IsZero() {
		return nil
	}
	jobs, err := w.gcJobs(req, res)
	if err != nil {
		return err
	}
	budget := req.MaxDeployments
	for _, deps := range jobs {
		if stop, err := w.gcJob(req, res, deps, &budget); err != nil || stop {
			return err
		}
	}
	return nil
}

// gcJobs reads the deployments of whole jobs from FromJob on, up to
// MaxScan of them, grouped by job. They are read first: the changes must
// not run under an iterator of the same transaction.
func (w gcWriter) gcJobs(req *structs.GCRequest, res *structs.GCResult) ([][]*structs.Deployment, error) {
	var it memdb.ResultIterator
	var err error
	if req.FromJob == "" {
		it, err = w.txn.Get(TableDeployments, "job")
	} else {
		cluster, ns, job, ok := structs.SplitJobKey(req.FromJob)
		if !ok {
			return nil, invalid("retention: job key %q is not namespace/job or cluster:namespace/job", req.FromJob)
		}
		it, err = w.txn.LowerBound(TableDeployments, "job", cluster, ns, job)
	}
	if err != nil {
		return nil, fmt.Errorf("list deployments: %w", err)
	}
	var jobs [][]*structs.Deployment
	scanned := 0
	for raw := it.Next(); raw != nil; raw = it.Next() {
		d := raw.(*structs.Deployment)
		if n := len(jobs); n > 0 && jobs[n-1][0].Key() == d.Key() {
			jobs[n-1] = append(jobs[n-1], d)
		} else if scanned >= req.MaxScan {
			res.More, res.NextJob = true, d.Key()
			break
		} else {
			jobs = append(jobs, []*structs.Deployment{d})
		}
		scanned++
	}
	return jobs, nil
}

// gcJob drops the specs and deletes the deployments of one job that the
// request lets go, newest first, within what is left of the budget. stop
// says the budget ran out: the entry changes nothing more.
func (w gcWriter) gcJob(req *structs.GCRequest, res *structs.GCResult, deps []*structs.Deployment, budget *int) (stop bool, err error) {
	slices.SortFunc(deps, func(a, b *structs.Deployment) int {
		// Newest first; CreateIndex is unique.
		switch {
		case a.CreateIndex > b.CreateIndex:
			return -1
		case a.CreateIndex < b.CreateIndex:
			return 1
		}
		return 0
	})
	block, err := first[structs.Block](w.reads, TableBlocks, deps[0].Cluster, deps[0].Namespace, deps[0].JobID)
	if err != nil {
		return false, err
	}
	for rank, d := range deps {
		if !d.State.Terminal() || (block != nil && block.DeploymentID == d.ID) {
			continue
		}
		del := rank >= req.KeepPerJob && d.StateEnteredAt.Before(req.DeploymentsBefore)
		drop := !del && d.StateEnteredAt.Before(req.SpecBefore) && hasSpec(d)
		if !del && !drop {
			continue
		}
		if *budget == 0 {
			// This job is read again by the next entry; what this
			// one changed no longer qualifies, so it moves on.
			res.More, res.NextJob = true, d.Key()
			return true, nil
		}
		*budget--
		if del {
			if err := w.delete(TableDeployments, d); err != nil {
				return false, fmt.Errorf("delete deployment %s: %w", d.ID, err)
			}
			res.DeploymentsDeleted++
			continue
		}
		if err := w.dropSpec(d); err != nil {
			return false, err
		}
		res.SpecsDropped++
	}
	return false, nil
}

// dropSpec writes d without its job spec and its hooks' specs.
func (w gcWriter) dropSpec(d *structs.Deployment) error {
	c := forWrite(d)
	c.Spec = nil
	c.Hooks = slices.Clone(d.Hooks)
	for i := range c.Hooks {
		c.Hooks[i].Spec = nil
	}
	c.ModifyIndex = w.index
	return w.put(TableDeployments, c)
}

func hasSpec(d *structs.Deployment) bool {
	if d.Spec != nil {
		return true
	}
	for _, h := range d.Hooks {
		if h.Spec != nil {
			return true
		}
	}
	return false
}

// gcEvents deletes the oldest events up to the first one at or after the
// cut-off, and their sequence numbers from their objects' lists.
func (w gcWriter) gcEvents(req *structs.GCRequest, res *structs.GCResult) error {
	if req.EventsBefore.IsZero() {
		return nil
	}
	it, err := w.txn.LowerBound(TableEvents, "id", uint64(0))
	if err != nil {
		return fmt.Errorf("list events: %w", err)
	}
	var gone []*structs.Event
	for raw := it.Next(); raw != nil; raw = it.Next() {
		e := raw.(*structs.Event)
		if !e.Time.Before(req.EventsBefore) {
			break
		}
		if len(gone) == req.MaxEvents {
			res.More = true
			break
		}
		gone = append(gone, e)
	}
	if len(gone) == 0 {
		return nil
	}
	last := gone[len(gone)-1].Seq
	objects := map[string]bool{}
	var order []string
	for _, e := range gone {
		if err := w.delete(TableEvents, e); err != nil {
			return fmt.Errorf("delete event %d: %w", e.Seq, err)
		}
		if !objects[e.Object] {
			objects[e.Object] = true
			order = append(order, e.Object)
		}
	}
	for _, obj := range order {
		raw, err := w.first(tableEventObjects, obj)
		if err != nil {
			return fmt.Errorf("event lookup: %w", err)
		}
		if raw == nil {
			continue
		}
		row := raw.(*eventObjects)
		// The deleted events are the oldest of all, so they are a prefix
		// of every object's list.
		i, _ := slices.BinarySearch(row.Seqs, last+1)
		if i == len(row.Seqs) {
			if err := w.delete(tableEventObjects, row); err != nil {
				return fmt.Errorf("delete event list of %s: %w", obj, err)
			}
			continue
		}
		// A copy, so the deleted prefix is freed and no reader's list
		// changes.
		if err := w.put(tableEventObjects, &eventObjects{Object: obj, Seqs: slices.Clone(row.Seqs[i:])}); err != nil {
			return err
		}
	}
	res.EventsDeleted = len(gone)
	return nil
}
