package structs

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestDeploymentState_ValidTerminalActiveWaiting(t *testing.T) {
	for _, tc := range []struct {
		state                   DeploymentState
		valid, terminal, active bool
		waiting                 bool
	}{
		{StateDetected, true, false, true, true},
		{StatePendingApproval, true, false, true, true},
		{StatePreHook, true, false, true, false},
		{StateApplying, true, false, true, false},
		{StatePostHook, true, false, true, false},
		{StateCompleted, true, true, false, false},
		{StateFailed, true, true, false, false},
		{StateRejected, true, true, false, false},
		{StateSuperseded, true, true, false, false},
		{StateExpired, true, true, false, false},
		{"", false, false, false, false},
		{"paused", false, false, false, false},
	} {
		t.Run(string(tc.state), func(t *testing.T) {
			if got := tc.state.Valid(); got != tc.valid {
				t.Errorf("Valid() = %v", got)
			}
			if got := tc.state.Terminal(); got != tc.terminal {
				t.Errorf("Terminal() = %v", got)
			}
			if got := tc.state.Active(); got != tc.active {
				t.Errorf("Active() = %v", got)
			}
			if got := tc.state.Waiting(); got != tc.waiting {
				t.Errorf("Waiting() = %v", got)
			}
		})
	}
	if len(AllStates) != 10 {
		t.Fatalf("%d states", len(AllStates))
	}
}

// TestTransitions_MatchSpecLifecycle pins the lifecycle of SPEC section 3
// (and the expiry of section 20): the table below is written from the spec, independently of Transitions.
func TestTransitions_MatchSpecLifecycle(t *testing.T) {
	type move struct {
		from, to DeploymentState
		by       Trigger
	}
	want := map[move]bool{
		{StateDetected, StatePendingApproval, TriggerSystem}:   true,
		{StateDetected, StatePreHook, TriggerSystem}:           true,
		{StateDetected, StateApplying, TriggerSystem}:          true,
		{StateDetected, StateSuperseded, TriggerSystem}:        true,
		{StateDetected, StateCompleted, TriggerSystem}:         true,
		{StateDetected, StateFailed, TriggerSystem}:            true,
		{StatePendingApproval, StatePreHook, TriggerApprove}:   true,
		{StatePendingApproval, StateApplying, TriggerApprove}:  true,
		{StatePendingApproval, StateRejected, TriggerReject}:   true,
		{StatePendingApproval, StateSuperseded, TriggerSystem}: true,
		{StatePendingApproval, StateCompleted, TriggerSystem}:  true,
		{StatePendingApproval, StateExpired, TriggerSystem}:    true,
		{StatePreHook, StateApplying, TriggerSystem}:           true,
		{StatePreHook, StateFailed, TriggerSystem}:             true,
		{StateApplying, StatePostHook, TriggerSystem}:          true,
		{StateApplying, StateCompleted, TriggerSystem}:         true,
		{StateApplying, StateFailed, TriggerSystem}:            true,
		{StatePostHook, StateCompleted, TriggerSystem}:         true,
		{StatePostHook, StateFailed, TriggerSystem}:            true,
	}
	states := append(slices.Clone(AllStates), "", "unknown")
	for _, from := range states {
		for _, to := range states {
			for _, by := range []Trigger{TriggerSystem, TriggerApprove, TriggerReject, "other"} {
				if got := CanTransition(from, to, by); got != want[move{from, to, by}] {
					t.Errorf("CanTransition(%s, %s, %s) = %v", from, to, by, got)
				}
			}
		}
	}
	if len(Transitions) != len(want) {
		t.Errorf("%d transitions, want %d", len(Transitions), len(want))
	}
	for _, tr := range Transitions {
		if !tr.From.Valid() || !tr.To.Valid() || tr.To == StateDetected || tr.From.Terminal() {
			t.Errorf("bad transition %+v", tr)
		}
	}
}

// TestBlock_BlocksUntilSpecOrLiveJobChanges covers the rules of SPEC section
// 4 on blocks, and the block an expired approval leaves (section 20).
func TestBlock_BlocksUntilSpecOrLiveJobChanges(t *testing.T) {
	before := &Block{Namespace: "default", JobID: "web", SpecHash: "h1", JobModifyIndex: 10}
	after := &Block{Namespace: "default", JobID: "web", SpecHash: "h1", JobModifyIndex: 10, AfterRegister: true}
	retried := &Block{SpecHash: "h1", JobModifyIndex: 10, AfterRegister: true, Retried: true, RetriedBy: "alice"}
	expired := &Block{SpecHash: "h1", JobModifyIndex: 10, Expired: true}
	for _, tc := range []struct {
		name      string
		b         *Block
		specHash  string
		liveIndex uint64
		want      bool
	}{
		{"no block", nil, "h1", 10, false},
		{"before register, nothing changed", before, "h1", 10, true},
		{"before register, spec changed", before, "h2", 10, false},
		{"before register, live job changed", before, "h1", 11, false},
		{"before register, both changed", before, "h2", 11, false},
		{"after register, nothing changed", after, "h1", 10, true},
		{"after register, live job changed (auto_revert)", after, "h1", 11, true},
		{"after register, spec changed", after, "h2", 10, false},
		{"retried", retried, "h1", 10, false},
		{"retried, live job changed", retried, "h1", 11, false},
		{"new job, nothing changed", &Block{SpecHash: "h1"}, "h1", 0, true},
		{"expired, nothing changed", expired, "h1", 10, true},
		{"expired, spec changed", expired, "h2", 10, false},
		{"expired, live job changed", expired, "h1", 11, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.b.Blocks(tc.specHash, tc.liveIndex); got != tc.want {
				t.Fatalf("Blocks(%q, %d) = %v, want %v", tc.specHash, tc.liveIndex, got, tc.want)
			}
			// Only a failure or a rejection shows the job as blocked.
			failure := tc.want && (tc.b == nil || !tc.b.Expired)
			if got := tc.b.Failure(tc.specHash, tc.liveIndex); got != failure {
				t.Fatalf("Failure(%q, %d) = %v, want %v", tc.specHash, tc.liveIndex, got, failure)
			}
		})
	}
	if before.Key() != "default/web" {
		t.Fatalf("key %q", before.Key())
	}
}

func TestParsePolicy_AcceptsOnlyExactNames(t *testing.T) {
	for _, s := range []string{"auto", "approval", "none"} {
		if p, err := ParsePolicy(s); err != nil || string(p) != s {
			t.Errorf("ParsePolicy(%q) = %q, %v", s, p, err)
		}
	}
	for _, s := range []string{"", "Auto", "manual", " auto"} {
		_, err := ParsePolicy(s)
		if err == nil || !strings.Contains(err.Error(), "invalid policy") || !strings.Contains(err.Error(), s) {
			t.Errorf("ParsePolicy(%q) error = %v", s, err)
		}
	}
}

// TestMessageTypesAppendOnly pins the value of every message type: a log
// written by one version must read the same in every later one.
func TestMessageTypesAppendOnly(t *testing.T) {
	want := []string{
		"DeploymentCreate", "DeploymentTransition", "DeploymentUpdate", "DeploymentDecision",
		"Pause", "Resume", "WindowUpsert", "WindowDelete", "WindowLift", "JobStatusUpsert",
		"JobStatusDelete", "RepoStatusUpsert", "DetectionCycle", "Retry", "EventAppend",
		"ACLPolicyUpsert", "ACLPolicyDelete", "ACLRoleUpsert", "ACLRoleDelete", "ACLTokenUpsert",
		"ACLTokenDelete", "ACLTokenBootstrap", "ACLAuthMethodUpsert", "ACLAuthMethodDelete",
		"ACLBindingRuleUpsert", "ACLBindingRuleDelete",
		"NotificationResult", "NotificationPrune", "NotifyMark", "AutopilotSetConfig", "GC", "Batch",
		"WebhookDelivery", "DeploymentSkipRequirements",
	}
	got := MessageTypes()
	if len(got) != len(want) {
		t.Fatalf("%d message types, want %d: a new type needs its name at the end of this list", len(got), len(want))
	}
	for i, mt := range got {
		if int(mt) != i {
			t.Fatalf("message type %d has value %d", i, mt)
		}
		if i > 0 && mt <= got[i-1] {
			t.Fatalf("message types out of order: %s after %s", mt, got[i-1])
		}
		if mt&IgnoreUnknownTypeFlag != 0 {
			t.Fatalf("message type %s uses the ignore-unknown bit", mt)
		}
		if mt.String() != want[i] {
			t.Errorf("message type %d is %s, want %s", i, mt, want[i])
		}
		if (mt | IgnoreUnknownTypeFlag).String() != mt.String() {
			t.Errorf("the ignore-unknown bit changes the name of %s", mt)
		}
	}
	if s := MessageType(99).String(); s != "MessageType(99)" {
		t.Errorf("unknown type prints %q", s)
	}
}

func TestEncodeDecode_RoundTripsWithJSONNames(t *testing.T) {
	now := time.Date(2025, 3, 1, 9, 30, 0, 123456789, time.FixedZone("CET", 3600))
	req := &DeploymentTransitionRequest{
		WriteMeta: WriteMeta{Time: now, Actor: "alice"},
		ID:        "d1", From: StatePostHook, To: StateFailed, Message: "m", Error: "e",
		Update: &DeploymentPatch{
			HookRun: &HookRun{Hook: "smoke", Phase: PhasePost, Position: 1, Token: "tok", DispatchedJobID: "smoke/dispatch-1",
				State: HookRunFailed, Error: "exit 1", StartedAt: now, FinishedAt: now.Add(time.Minute)},
			RegisterStartedAt: &now, Registered: new(bool), JobVersion: new(uint64),
			NomadEvalID: new(string), HealthDeadline: &now, Message: "x",
		},
	}
	data, err := Encode(DeploymentTransitionRequestType, req)
	if err != nil {
		t.Fatal(err)
	}
	if MessageType(data[0]) != DeploymentTransitionRequestType {
		t.Fatalf("type byte %d", data[0])
	}
	// The body uses the JSON names, as snapshots and every reader do.
	for _, name := range []string{"actor", "register_started_at", "dispatched_job_id"} {
		if !strings.Contains(string(data), name) {
			t.Errorf("encoded entry does not use the field name %q", name)
		}
	}
	var got DeploymentTransitionRequest
	if err := Decode(data[1:], &got); err != nil {
		t.Fatal(err)
	}
	if !got.Time.Equal(now) || !got.Update.RegisterStartedAt.Equal(now) || !got.Update.HookRun.FinishedAt.Equal(now.Add(time.Minute)) {
		t.Fatalf("times did not survive: %+v", got)
	}
	// Compare the rest with the times made equal.
	got.Time, got.Update.RegisterStartedAt, got.Update.HealthDeadline = now, &now, &now
	got.Update.HookRun.StartedAt, got.Update.HookRun.FinishedAt = now, now.Add(time.Minute)
	if !reflect.DeepEqual(&got, req) {
		t.Fatalf("decoded %+v\nwant %+v", got, req)
	}

	if err := Decode([]byte{0xc1}, &got); err == nil || !strings.Contains(err.Error(), "DeploymentTransitionRequest") {
		t.Fatalf("decode of garbage: %v", err)
	}
	if _, err := Encode(PauseRequestType, complex(1, 2)); err == nil || !strings.Contains(err.Error(), "Pause") {
		t.Fatalf("encode of a value that cannot be encoded: %v", err)
	}
}

func TestDeployment_HooksRunsAndStartState(t *testing.T) {
	d := &Deployment{
		ID: "d1", Namespace: "default", JobID: "web", Spec: []byte("spec"),
		Hooks: []FrozenHook{
			{Name: "backup", Phase: PhasePre, Position: 0, Spec: []byte("b"), MetaKeys: []string{"k"}},
			{Name: "smoke", Phase: PhasePost, Position: 0, Spec: []byte("s")},
			{Name: "migrate", Phase: PhasePre, Position: 1, Spec: []byte("m")},
		},
		HookRuns:  []HookRun{{Hook: "backup", Phase: PhasePre, Position: 0, State: HookRunRunning}},
		Decisions: []Decision{{Kind: DecisionApprove, Actor: "alice"}},
	}
	if d.Key() != "default/web" || JobKey("", "a", "b") != "a/b" {
		t.Fatalf("keys")
	}
	if pre := d.HooksOf(PhasePre); len(pre) != 2 || pre[0].Name != "backup" || pre[1].Name != "migrate" {
		t.Fatalf("pre-hooks %+v", pre)
	}
	if d.StartState() != StatePreHook {
		t.Fatalf("start state with pre-hooks: %s", d.StartState())
	}
	if r, ok := d.HookRun(PhasePre, 0); !ok || r.Hook != "backup" {
		t.Fatalf("hook run pre/0: %+v %v", r, ok)
	}
	if _, ok := d.HookRun(PhasePost, 0); ok {
		t.Fatalf("hook run post/0 found")
	}
	if (&Deployment{Hooks: d.HooksOf(PhasePost)}).StartState() != StateApplying {
		t.Fatalf("start state with post-hooks only")
	}
	if HookRunToken("d1", PhasePost, 2) != "nops-d1-post-2" {
		t.Fatalf("token %q", HookRunToken("d1", PhasePost, 2))
	}

	// Copy is deep: changing the copy leaves the original alone.
	c := d.Copy()
	if !reflect.DeepEqual(c, d) {
		t.Fatalf("copy differs")
	}
	c.Spec[0] = 'X'
	c.Hooks[0].Spec[0] = 'X'
	c.Hooks[0].MetaKeys[0] = "X"
	c.Hooks[1].Name = "X"
	c.HookRuns[0].State = HookRunFailed
	c.Decisions[0].Actor = "X"
	if string(d.Spec) != "spec" || string(d.Hooks[0].Spec) != "b" || d.Hooks[0].MetaKeys[0] != "k" ||
		d.Hooks[1].Name != "smoke" || d.HookRuns[0].State != HookRunRunning || d.Decisions[0].Actor != "alice" {
		t.Fatalf("changing a copy changed the original: %+v", d)
	}
	if (*Deployment)(nil).Copy() != nil {
		t.Fatalf("copy of nil")
	}

	p := d.Public()
	if p.Spec != nil || p.Hooks[0].Spec != nil || p.Hooks[2].Spec != nil || p.Hooks[0].Name != "backup" {
		t.Fatalf("public copy keeps specs: %+v", p)
	}
	if d.Spec == nil || d.Hooks[0].Spec == nil {
		t.Fatalf("Public changed the original")
	}
}

func TestKey_NamespaceSlashJobOrGlobal(t *testing.T) {
	if k := (&PauseRequest{Global: true, Namespace: "x", JobID: "y"}).Key(); k != GlobalPauseKey {
		t.Errorf("global pause key %q", k)
	}
	if k := (&PauseRequest{Namespace: "x", JobID: "y"}).Key(); k != "x/y" {
		t.Errorf("job pause key %q", k)
	}
	if k := (&WindowLift{Namespace: "x", JobID: "y"}).Key(); k != "x/y" {
		t.Errorf("lift key %q", k)
	}
	if k := (&JobStatus{Namespace: "x", JobID: "y"}).Key(); k != "x/y" {
		t.Errorf("status key %q", k)
	}
}

func TestErrorsAreDistinct(t *testing.T) {
	errs := []error{ErrNotFound, ErrConflict, ErrInvalid, ErrNotLeader, ErrNoLeader}
	for i, a := range errs {
		for j, b := range errs {
			if (i == j) != errors.Is(a, b) {
				t.Errorf("errors.Is(%v, %v) = %v", a, b, i != j)
			}
		}
	}
}

// TestDeploymentPatch_ZeroDeadlineSurvivesTheLog checks that a patch that
// sets the health deadline to the zero time (the apply timeout paused while
// canaries wait) still carries it after the log encoding, and that an unset
// field stays unset.
func TestDeploymentPatch_ZeroDeadlineSurvivesTheLog(t *testing.T) {
	var zero time.Time
	buf, err := Encode(DeploymentUpdateRequestType, &DeploymentUpdateRequest{ID: "d", Update: &DeploymentPatch{HealthDeadline: &zero}})
	if err != nil {
		t.Fatal(err)
	}
	var got DeploymentUpdateRequest
	if err := Decode(buf[1:], &got); err != nil {
		t.Fatal(err)
	}
	if got.Update == nil || got.Update.HealthDeadline == nil {
		t.Fatal("a zero health deadline was dropped by the encoding")
	}
	if !got.Update.HealthDeadline.IsZero() {
		t.Fatalf("deadline %v, want the zero time", got.Update.HealthDeadline)
	}
	if got.Update.RegisterStartedAt != nil || got.Update.Registered != nil || got.Update.HookRun != nil {
		t.Fatalf("unset fields came back set: %+v", got.Update)
	}
}

// TestDiffHashStaysInternal: the hash of the unredacted diff survives the
// log encoding and never appears in JSON.
func TestDiffHashStaysInternal(t *testing.T) {
	d := &Deployment{ID: "d1", DiffHash: "cafe0123"}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "cafe0123") || strings.Contains(string(b), "diff_hash") {
		t.Fatalf("JSON of a deployment publishes its diff hash: %s", b)
	}
	data, err := Encode(DeploymentCreateRequestType, &DeploymentCreateRequest{Deployment: d})
	if err != nil {
		t.Fatal(err)
	}
	var got DeploymentCreateRequest
	if err := Decode(data[1:], &got); err != nil || got.Deployment.DiffHash != "cafe0123" {
		t.Fatalf("the diff hash did not survive the log: %v %+v", err, got.Deployment)
	}
}

// MessageTypes lists every known message type, in order.
func MessageTypes() []MessageType {
	out := make([]MessageType, 0, len(messageTypeNames))
	for t := range messageTypeNames {
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

func TestTruncateText_CutsAtACharacterBoundary(t *testing.T) {
	for _, tc := range []struct {
		in    string
		limit int
		want  string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"abcdef", 3, "abc"},
		{"héllo", 2, "h"}, // é is two bytes: not cut in half
		{"héllo", 3, "hé"},
		{"日本", 4, "日"},
		{"abc", 0, ""},
	} {
		got := TruncateText(tc.in, tc.limit)
		if got != tc.want || len(got) > tc.limit {
			t.Errorf("TruncateText(%q, %d) = %q, want %q", tc.in, tc.limit, got, tc.want)
		}
	}
	if err := CheckText("commit_message", TruncateText(strings.Repeat("é", MaxTextLen), MaxTextLen)); err != nil {
		t.Errorf("a truncated text is refused: %v", err)
	}
}

func TestCommitSubject_IsTheFirstLine(t *testing.T) {
	for in, want := range map[string]string{
		"Bump web to v2\n\nThe body.\n": "Bump web to v2",
		"  one line  ":                  "one line",
		"\nsubject after a blank\nbody": "subject after a blank",
		"":                              "",
	} {
		if got := CommitSubject(in); got != want {
			t.Errorf("CommitSubject(%q) = %q, want %q", in, got, want)
		}
	}
	for in, want := range map[string]string{
		"Bump web to v2\n\nThe body.\n": "The body.",
		"one line":                      "",
		"s\nline two\n  line three  ":   "line two\n  line three",
	} {
		if got := CommitBody(in); got != want {
			t.Errorf("CommitBody(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestCapFileDiff_CutsWholeLinesWithAMarker(t *testing.T) {
	small := "--- a/x\n+++ b/x\n@@ -1 +1 @@\n-a\n+b\n"
	if got := CapFileDiff(small); got != small {
		t.Errorf("a small diff changed: %q", got)
	}
	line := "+" + strings.Repeat("x", 99) + "\n"
	big := strings.Repeat(line, MaxFileDiffLen/len(line)+10)
	got := CapFileDiff(big)
	if len(got) > MaxFileDiffLen || !strings.HasSuffix(got, FileDiffCut) {
		t.Fatalf("capped diff: %d bytes, ends %q", len(got), got[max(0, len(got)-80):])
	}
	if body := strings.TrimSuffix(got, FileDiffCut); !strings.HasPrefix(big, body) || len(body)%len(line) != 0 {
		t.Errorf("the capped diff does not keep whole lines of the original")
	}
	if err := CheckFileDiff("file_diff", got); err != nil {
		t.Errorf("a capped diff is refused: %v", err)
	}
	if err := CheckFileDiff("file_diff", big); !errors.Is(err, ErrInvalid) {
		t.Errorf("an over-limit diff: %v; want ErrInvalid", err)
	}
}

func TestParseFileDiff_KindsFollowTheHunkCounts(t *testing.T) {
	diff := "# a note\n--- a/x\n+++ b/x\n@@ -1,3 +1,3 @@\n keep\n--- removed, reads like a header\n+++ added, reads like a header\n keep\n" +
		"@@ -9 +9,0 @@\n-gone\n\\ No newline at end of file\n--- /dev/null\n+++ b/y\n@@ -0,0 +1 @@\n+new\n"
	var kinds []string
	for _, l := range ParseFileDiff(diff) {
		kinds = append(kinds, l.Kind)
	}
	want := []string{DiffLineNote, DiffLineFile, DiffLineFile, DiffLineHunk, DiffLineContext, DiffLineRemoved, DiffLineAdded, DiffLineContext,
		DiffLineHunk, DiffLineRemoved, DiffLineContext, DiffLineFile, DiffLineFile, DiffLineHunk, DiffLineAdded}
	if !slices.Equal(kinds, want) {
		t.Fatalf("kinds %v\nwant  %v", kinds, want)
	}
	if a, r := FileDiffCounts(diff); a != 2 || r != 2 {
		t.Fatalf("counts +%d -%d, want +2 -2", a, r)
	}
	if ParseFileDiff("") != nil {
		t.Fatal("an empty diff has lines")
	}
}

// TestDeployment_Approvals covers what a deployment says of its approvals
// (SPEC section 20): the count it needs, who approved, the refusal of a
// second approval by one identity, and when it expires.
func TestDeployment_Approvals(t *testing.T) {
	at := time.Date(2025, 5, 1, 9, 0, 0, 0, time.UTC)
	d := &Deployment{ID: "d1", State: StatePendingApproval, StateEnteredAt: at, ApprovalsRequired: 2, Decisions: []Decision{
		{Kind: DecisionApprove, Actor: "alice", Time: at.Add(time.Minute)},
		{Kind: DecisionReject, Actor: "bob", Time: at.Add(2 * time.Minute)},
	}}
	if got := (&Deployment{}).RequiredApprovals(); got != 1 {
		t.Fatalf("a deployment recorded before the rule needs %d approvals, want 1", got)
	}
	if got := d.ApprovalsGiven(); len(got) != 1 || got[0].Actor != "alice" {
		t.Fatalf("approvals %+v, want alice's alone", got)
	}
	if !d.ApprovedBy("Alice") || d.ApprovedBy("bob") {
		t.Fatal("ApprovedBy must match approvals only, without regard to case")
	}
	err := d.ApprovalRefusal("ALICE", false)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "nops_approvals") {
		t.Fatalf("a second approval by alice: %v, want a conflict naming nops_approvals", err)
	}
	if err := d.ApprovalRefusal("carol", true); err != nil {
		t.Fatalf("carol may approve: %v", err)
	}

	// approval { forbid_self }: the commit's author, by name or email.
	d.CommitAuthor = "Ada Lovelace <ada@example.com>"
	for _, who := range []string{"Ada Lovelace", "ada@example.com", " ADA@example.COM "} {
		err := d.ApprovalRefusal(who, true)
		if !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), "approval forbid_self") {
			t.Fatalf("%q, the author, may approve under forbid_self: %v", who, err)
		}
		if err := d.ApprovalRefusal(who, false); err != nil {
			t.Fatalf("%q is refused without forbid_self: %v", who, err)
		}
	}
	for _, who := range []string{"ada", "Lovelace", "example.com", ""} {
		if d.AuthoredBy(who) {
			t.Fatalf("%q counts as the author %q", who, d.CommitAuthor)
		}
	}
	if (&Deployment{}).AuthoredBy("anonymous") {
		t.Fatal("a deployment of an unknown author has one")
	}
	// The committer (who rebased or cherry-picked the commit) may not
	// approve either, and the refusal names both.
	d.CommitCommitter = "Grace Hopper <grace@example.com>"
	for _, who := range []string{"Grace Hopper", "grace@example.com", "Ada Lovelace"} {
		err := d.ApprovalRefusal(who, true)
		if !errors.Is(err, ErrForbidden) || !strings.Contains(err.Error(), "committer Grace Hopper <grace@example.com>") {
			t.Fatalf("%q, who wrote the commit, may approve under forbid_self: %v", who, err)
		}
	}
	if d.AuthoredBy("carol") {
		t.Fatal("carol counts as the author or the committer")
	}
	for author, want := range map[string][2]string{
		"Ada Lovelace <ada@example.com>": {"Ada Lovelace", "ada@example.com"},
		"<bot@example.com>":              {"", "bot@example.com"},
		"just a name":                    {"just a name", ""},
		"":                               {"", ""},
	} {
		if name, email := SplitAuthor(author); name != want[0] || email != want[1] {
			t.Errorf("SplitAuthor(%q) = %q, %q", author, name, email)
		}
	}
	if !d.ApprovalExpiresAt().IsZero() {
		t.Fatal("a deployment without a TTL never expires")
	}
	d.ApprovalTTL = time.Hour
	if got := d.ApprovalExpiresAt(); !got.Equal(at.Add(time.Hour)) {
		t.Fatalf("expires at %s, want an hour after it entered pending_approval", got)
	}
	running := *d
	running.State = StateApplying
	if !running.ApprovalExpiresAt().IsZero() {
		t.Fatal("only a deployment pending approval expires")
	}

	// The API lists the approvals; the log and snapshots never hold the
	// list, which Decisions already records.
	pub := d.Public()
	if len(pub.Approvals) != 1 || pub.Approvals[0].Actor != "alice" {
		t.Fatalf("Public approvals %+v", pub.Approvals)
	}
	b, err := json.Marshal(pub)
	if err != nil || !strings.Contains(string(b), `"approvals":[{"kind":"approve","actor":"alice"`) ||
		!strings.Contains(string(b), `"approvals_required":2`) {
		t.Fatalf("API JSON %s (%v) lacks approvals", b, err)
	}
	enc, err := Encode(DeploymentCreateRequestType, &DeploymentCreateRequest{Deployment: pub})
	if err != nil {
		t.Fatal(err)
	}
	var back DeploymentCreateRequest
	if err := Decode(enc[1:], &back); err != nil {
		t.Fatal(err)
	}
	if back.Deployment.Approvals != nil || len(back.Deployment.Decisions) != 2 || back.Deployment.ApprovalsRequired != 2 {
		t.Fatalf("the log holds approvals %+v, decisions %d, required %d", back.Deployment.Approvals,
			len(back.Deployment.Decisions), back.Deployment.ApprovalsRequired)
	}
}
