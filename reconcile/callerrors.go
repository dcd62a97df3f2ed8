package reconcile

import (
	"context"
	"sort"

	"github.com/nops-dev/nops/reconcile/nomadx"
	"github.com/nops-dev/nops/structs"
)

// Nomad's refusals are shown where an operator looks: a call that Nomad
// refuses for the token (401 or 403) in the apply loop or the hook revision
// clean-up is named in the observed status of the job it was made for,
// from the next detection cycle until the same step goes through. Calls
// made by detection itself already fail the job's status.

// noteRefusal records, or with a nil err clears, the refusal of one step of
// a job. Only refusals for the token are kept: other errors are retried
// and logged. A new refusal asks for a detection cycle, so the status shows
// it at once.
func (m *core) noteRefusal(key, step string, err error) {
	m.mu.Lock()
	if err == nil {
		if steps := m.refusals[key]; steps != nil {
			delete(steps, step)
			if len(steps) == 0 {
				delete(m.refusals, key)
			}
		}
		m.mu.Unlock()
		return
	}
	if !nomadx.IsPermissionDenied(err) {
		m.mu.Unlock()
		return
	}
	if m.refusals == nil {
		m.refusals = map[string]map[string]string{}
	}
	if m.refusals[key] == nil {
		m.refusals[key] = map[string]string{}
	}
	msg := "Nomad refused " + step + ": " + err.Error()
	changed := m.refusals[key][step] != msg
	m.refusals[key][step] = msg
	m.mu.Unlock()
	if changed {
		m.logger.Warn("Nomad refused a call: check the token's ACL policy", "job", key, "step", step, "error", err)
		m.TriggerDetection()
	}
}

// refusalsOf returns the refusals recorded for a job, sorted.
func (m *core) refusalsOf(key string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for _, msg := range m.refusals[key] {
		out = append(out, msg)
	}
	sort.Strings(out)
	return out
}

// refusedList records, when Nomad refuses to list the live jobs, that
// refusal as the error of every managed job: nothing about them can be
// known until the token allows it. Nothing else changes.
func (m *Detector) refusedList(ctx context.Context, managed map[string]*declared, err error) {
	statuses := make(map[string]*structs.JobStatus, len(managed))
	for key, d := range managed {
		statuses[key] = d.errorStatus(d.file, err.Error())
	}
	if rerr := m.recordStatuses(ctx, statuses, nil, true, m.now()); rerr != nil {
		m.logger.Error("record the refusal of the job list", "error", rerr)
	}
}
