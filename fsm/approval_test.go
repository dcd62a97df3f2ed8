package fsm

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/structs"
)

// The approval rules of SPEC section 20, decided by the FSM from the
// recorded approvals and the stamped time of each entry. Each row is a
// deployment pending approval and a sequence of requests, each accepted
// or refused, and what the deployment, its job's block and the outbox say
// after them.

// approvalStep is one request of a row: an approval, a rejection or the
// leader's proposal of an expiry, after the clock moved by wait.
type approvalStep struct {
	kind  string // structs.DecisionApprove, structs.DecisionReject or "expire"
	actor string
	// forbidSelf is the leader's approval { forbid_self } in the request.
	forbidSelf bool
	wait       time.Duration
	// refused is the sentinel of a refusal and names what its error
	// must say; nil means accepted.
	refused error
	names   []string
}

func approve(actor string) approvalStep {
	return approvalStep{kind: structs.DecisionApprove, actor: actor}
}
func reject(actor string) approvalStep {
	return approvalStep{kind: structs.DecisionReject, actor: actor}
}

func (s approvalStep) after(d time.Duration) approvalStep { s.wait = d; return s }

func (s approvalStep) refusedWith(err error, names ...string) approvalStep {
	s.refused, s.names = err, names
	return s
}

func expire() approvalStep { return approvalStep{kind: "expire", actor: "nops"} }

func (s approvalStep) forbiddingSelf() approvalStep { s.forbidSelf = true; return s }

// author is the author of the commit of every row's deployment.
const author = "Ada Lovelace <ada@example.com>"

func TestApprovalRules(t *testing.T) {
	cases := []struct {
		rule string
		// required is nops_approvals (0: the default) and ttl
		// nops_approval_ttl of the deployment.
		required int
		ttl      time.Duration
		steps    []approvalStep
		// What the deployment and its job show after the steps.
		state     structs.DeploymentState
		approvers string
		block     string // "", "failure" or "expired"
		// notified are the notification kinds the steps wrote, in order.
		notified string
	}{
		{rule: "N=1 is unchanged: one approval starts it", steps: []approvalStep{approve("alice")},
			state: structs.StateApplying, approvers: "alice", notified: "approved,applying"},
		{rule: "the first of two approvals leaves it pending, recorded and notified", required: 2,
			steps: []approvalStep{approve("alice")},
			state: structs.StatePendingApproval, approvers: "alice", notified: "approval"},
		{rule: "the same identity again is refused and counts once", required: 2,
			steps: []approvalStep{approve("alice"), approve("alice").refusedWith(structs.ErrConflict, "nops_approvals", "alice already approved")},
			state: structs.StatePendingApproval, approvers: "alice", notified: "approval"},
		{rule: "one identity is one identity whatever the case of its name", required: 2,
			steps: []approvalStep{approve("alice"), approve("Alice").refusedWith(structs.ErrConflict, "nops_approvals")},
			state: structs.StatePendingApproval, approvers: "alice", notified: "approval"},
		{rule: "a second identity moves it on", required: 2,
			steps: []approvalStep{approve("alice"), approve("bob")},
			state: structs.StateApplying, approvers: "alice,bob", notified: "approval,approved,applying"},
		{rule: "three of three, each counted once", required: 3,
			steps: []approvalStep{approve("alice"), approve("alice").refusedWith(structs.ErrConflict, "nops_approvals"), approve("bob"), approve("carol")},
			state: structs.StateApplying, approvers: "alice,bob,carol", notified: "approval,approval,approved,applying"},
		{rule: "a rejection after one approval rejects", required: 2,
			steps: []approvalStep{approve("alice"), reject("bob")},
			state: structs.StateRejected, approvers: "alice", block: "failure", notified: "approval,rejected,blocked"},
		{rule: "the approver may still reject", required: 2,
			steps: []approvalStep{approve("alice"), reject("alice")},
			state: structs.StateRejected, approvers: "alice", block: "failure", notified: "approval,rejected,blocked"},
		{rule: "nothing is decided once it moved on", required: 2,
			steps: []approvalStep{approve("alice"), approve("bob"), approve("carol").refusedWith(structs.ErrConflict, "not pending approval"),
				reject("carol").refusedWith(structs.ErrConflict, "not pending approval")},
			state: structs.StateApplying, approvers: "alice,bob", notified: "approval,approved,applying"},

		// approval { forbid_self }: the commit's author, by name or
		// email, may not approve; the setting comes with the request.
		{rule: "forbid_self refuses the commit's author by name (403)",
			steps: []approvalStep{approve("Ada Lovelace").forbiddingSelf().refusedWith(structs.ErrForbidden, "approval forbid_self", "Ada Lovelace wrote commit")},
			state: structs.StatePendingApproval},
		{rule: "forbid_self refuses the commit's author by email, then another identity approves",
			steps: []approvalStep{approve("ADA@example.com").forbiddingSelf().refusedWith(structs.ErrForbidden, "approval forbid_self"),
				approve("grace").forbiddingSelf()},
			state: structs.StateApplying, approvers: "grace", notified: "approved,applying"},
		{rule: "without forbid_self the author may approve", steps: []approvalStep{approve("Ada Lovelace")},
			state: structs.StateApplying, approvers: "Ada Lovelace", notified: "approved,applying"},
		{rule: "forbid_self does not stop the author rejecting",
			steps: []approvalStep{{kind: structs.DecisionReject, actor: "ada@example.com", forbidSelf: true}},
			state: structs.StateRejected, block: "failure", notified: "rejected,blocked"},

		// The approval TTL.
		{rule: "an expiry before the TTL ran out is refused", ttl: time.Hour,
			steps: []approvalStep{expire().after(time.Hour-2*time.Second).refusedWith(structs.ErrConflict, "approval TTL (1h0m0s) has not run out")},
			state: structs.StatePendingApproval},
		{rule: "without a TTL it never expires",
			steps: []approvalStep{expire().after(1000*time.Hour).refusedWith(structs.ErrConflict, "no approval TTL")},
			state: structs.StatePendingApproval},
		{rule: "past its TTL it expires: no failure, notified expired", ttl: time.Hour,
			steps: []approvalStep{expire().after(time.Hour)},
			state: structs.StateExpired, block: "expired", notified: "expired"},
		{rule: "an approval after the TTL ran out is refused, expired or not", ttl: time.Hour, required: 2,
			steps: []approvalStep{approve("alice"), approve("bob").after(time.Hour).refusedWith(structs.ErrConflict, "expired at", "nops_approval_ttl"), expire()},
			state: structs.StateExpired, approvers: "alice", block: "expired", notified: "approval,expired"},
		{rule: "approvals before the TTL ran out do not stop its expiry", ttl: time.Hour, required: 2,
			steps: []approvalStep{approve("alice"), expire().after(time.Hour)},
			state: structs.StateExpired, approvers: "alice", block: "expired", notified: "approval,expired"},
		{rule: "a rejection after the TTL ran out is refused: it ends expired, no block", ttl: time.Hour,
			steps: []approvalStep{reject("alice").after(2*time.Hour).refusedWith(structs.ErrConflict, "expired at", "nops_approval_ttl"), expire()},
			state: structs.StateExpired, block: "expired", notified: "expired"},
		{rule: "a rejection before the TTL ran out rejects", ttl: time.Hour,
			steps: []approvalStep{reject("alice").after(time.Hour - 3*time.Second)},
			state: structs.StateRejected, block: "failure", notified: "rejected,blocked"},
		{rule: "a deployment that moved on does not expire", ttl: time.Hour,
			steps: []approvalStep{approve("alice"), expire().after(time.Hour).refusedWith(structs.ErrConflict, "cannot move from applying to expired")},
			state: structs.StateApplying, approvers: "alice", notified: "approved,applying"},
	}
	for _, tc := range cases {
		t.Run(tc.rule, func(t *testing.T) {
			h := newHarness(t)
			d := testDeployment("d1", "default", "web", 0, 0)
			d.Policy, d.ApprovalsRequired, d.ApprovalTTL = structs.PolicyApproval, tc.required, tc.ttl
			d.CommitAuthor = author
			h.create(d)
			h.mustTransition("d1", structs.StatePendingApproval, nil)
			before := len(h.outbox())
			for i, s := range tc.steps {
				h.now = h.now.Add(s.wait)
				do := func() error {
					if s.kind == "expire" {
						return h.apply(structs.DeploymentTransitionRequestType, &structs.DeploymentTransitionRequest{
							WriteMeta: h.meta(s.actor), ID: "d1", To: structs.StateExpired, Message: "approval expired",
						})
					}
					return h.apply(structs.DeploymentDecisionRequestType, &structs.DeploymentDecisionRequest{
						WriteMeta: h.meta(s.actor), ID: "d1", Decision: s.kind, ForbidSelf: s.forbidSelf,
					})
				}
				if s.refused != nil {
					h.refused(s.refused, s.names, do)
					continue
				}
				if err := do(); err != nil {
					t.Fatalf("step %d (%s by %s): %v", i, s.kind, s.actor, err)
				}
			}
			got := h.deployment("d1")
			var approvers []string
			for _, a := range got.ApprovalsGiven() {
				approvers = append(approvers, a.Actor)
			}
			if got.State != tc.state || strings.Join(approvers, ",") != tc.approvers {
				t.Fatalf("deployment is %s approved by %q, want %s approved by %q", got.State, approvers, tc.state, tc.approvers)
			}
			b, err := h.state().Block("", "default", "web")
			if err != nil {
				t.Fatal(err)
			}
			block := ""
			switch {
			case b != nil && b.Expired:
				block = "expired"
			case b != nil:
				block = "failure"
			}
			if block != tc.block {
				t.Fatalf("block %q (%+v), want %q", block, b, tc.block)
			}
			if k := outboxKinds(h.outbox()[before:]); k != tc.notified {
				t.Fatalf("notified %q, want %q", k, tc.notified)
			}
		})
	}
}

// TestApprovalRecorded checks what one approval of several leaves behind:
// the decision with who and when, an event that counts it, and a
// notification that names the approvers, each at the entry's index and
// stamped time.
func TestApprovalRecorded(t *testing.T) {
	h := newHarness(t)
	d := testDeployment("d1", "default", "web", 0, 0)
	d.Policy, d.ApprovalsRequired = structs.PolicyApproval, 2
	h.create(d)
	h.mustTransition("d1", structs.StatePendingApproval, nil)
	entered := h.deployment("d1").StateEnteredAt
	n := len(h.events())
	if err := h.decide("d1", structs.DecisionApprove, "alice"); err != nil {
		t.Fatal(err)
	}
	got := h.deployment("d1")
	if len(got.Decisions) != 1 || got.Decisions[0].Actor != "alice" || !got.Decisions[0].Time.Equal(h.now) ||
		got.Decisions[0].Comment != "looks good" {
		t.Fatalf("decisions %+v", got.Decisions)
	}
	if got.ModifyIndex != h.index || !got.UpdatedAt.Equal(h.now) || !got.StateEnteredAt.Equal(entered) {
		t.Fatalf("a recorded approval moved modify index %d, updated %s, entered %s", got.ModifyIndex, got.UpdatedAt, got.StateEnteredAt)
	}
	wantEvents(t, h.eventsSince(n), eventWant{Kind: structs.EventKindDeployment, Object: "d1", From: "pending_approval",
		To: "pending_approval", Actor: "alice", Message: "approved by alice: 1 of 2 approvals: looks good"})
	out := h.outbox()
	last := out[len(out)-1]
	if last.Kind != structs.NotifyApproval || last.Actor != "alice" || last.Deployment == nil ||
		strings.Join(last.Deployment.Approvals, ",") != "alice" || last.Deployment.ApprovalsRequired != 2 {
		t.Fatalf("notification %+v (deployment %+v)", last, last.Deployment)
	}
	if err := h.decide("d1", structs.DecisionApprove, "bob"); err != nil {
		t.Fatal(err)
	}
	out = h.outbox()
	approved := out[len(out)-2]
	if approved.Kind != structs.NotifyApproved || approved.Actor != "bob" || strings.Join(approved.Deployment.Approvals, ",") != "alice,bob" {
		t.Fatalf("approved notification %+v (deployment %+v)", approved, approved.Deployment)
	}
	if e := h.events(); e[len(e)-1].Message != "approved: 2 of 2 approvals: looks good" {
		t.Fatalf("last event %q", e[len(e)-1].Message)
	}
}

// TestExpiredBlockIsNoFailure checks what an expired approval leaves: a
// block that keeps the same spec from being proposed again, which a retry
// lifts, and which a new deployment replaces without an "unblocked"
// notification, since nothing said the job was blocked.
func TestExpiredBlockIsNoFailure(t *testing.T) {
	h := newHarness(t)
	d := h.createExpired("d1", "default", "web", time.Minute)
	b, err := h.state().Block("", "default", "web")
	if err != nil || b == nil || !b.Expired || b.DeploymentID != "d1" || !b.Blocks(d.SpecHash, d.JobModifyIndex) ||
		b.Failure(d.SpecHash, d.JobModifyIndex) {
		t.Fatalf("block %+v (%v), want an expired block of d1 that is no failure", b, err)
	}
	h.mustApply(structs.RetryRequestType, &structs.RetryRequest{WriteMeta: h.meta("bob"), Namespace: "default", JobID: "web"})
	h.create(testDeployment("d2", "default", "web", 0, 0))
	if b, _ := h.state().Block("", "default", "web"); b != nil {
		t.Fatalf("the new deployment left the block: %+v", b)
	}
	n := len(h.outbox())
	h.now = h.now.Add(time.Minute)
	h.createExpired("d3", "default", "web3", time.Minute)
	h.create(testDeployment("d4", "default", "web3", 0, 0))
	if k := outboxKinds(h.outbox()[n:]); k != "created,pending_approval,expired,created" {
		t.Fatalf("kinds %s: a new deployment after an expiry notifies no unblock", k)
	}
	if !errors.Is(h.decide("d3", structs.DecisionApprove, "alice"), structs.ErrConflict) {
		t.Fatal("an expired deployment was approved")
	}
}

// TestCreateRefusesWhatARestoreWould: a deployment needing more approvals
// than a job may ask for, or whose plan diff nests deeper than a snapshot
// reads back, is refused when it is created, and nothing is written.
func TestCreateRefusesWhatARestoreWould(t *testing.T) {
	deep := structs.DiffObject{Name: "leaf"}
	for range structs.MaxDiffDepth {
		deep = structs.DiffObject{Name: "block", Objects: []structs.DiffObject{deep}}
	}
	for name, change := range map[string]func(*structs.Deployment){
		"too many approvals": func(d *structs.Deployment) { d.ApprovalsRequired = 101 },
		"plan diff too deep": func(d *structs.Deployment) {
			d.PlanDiff = &structs.PlanDiff{Groups: []structs.GroupDiff{{Name: "web", Objects: []structs.DiffObject{deep}}}}
		},
	} {
		h := newHarness(t)
		d := testDeployment("d1", "default", "web", 1, 1)
		change(d)
		err := h.apply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: h.meta("detector"), Deployment: d})
		if !errors.Is(err, structs.ErrInvalid) {
			t.Errorf("%s: create answered %v, want ErrInvalid", name, err)
		}
		if got, err := h.fsm.State().Deployment("d1"); err != nil || got != nil {
			t.Errorf("%s: the deployment was written: %+v %v", name, got, err)
		}
	}
}
