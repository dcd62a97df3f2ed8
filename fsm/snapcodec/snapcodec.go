// Package snapcodec writes and reads the deployments and events of a
// snapshot of the FSM's state: most of a snapshot, written by hand as
// msgpack arrays of their fields in the order the fields are declared,
// without the codec's reflection. The other kinds are few and go through
// the codec (structs.NewMsgpackHandle) as maps; the framing of records,
// the compression and the checks of the state are package fsm's.
//
// Guarantees:
//
//   - Equal values give equal bytes, and a value read back writes the same
//     bytes again: a nil slice is written as nil and an empty one as an
//     empty array. Times are written as the codec writes them: the bin of
//     time.MarshalBinary.
//   - The arrays follow the rules the event record set: a field is added at
//     the end; a reader skips fields it does not know, and leaves the
//     fields a shorter array lacks at zero. A nil reads as the zero value
//     of any field.
//   - A record that does not decode is refused with an error naming the
//     field, and no panic: every length is checked against what the record
//     holds before anything is allocated for it, and a list is refused
//     when its record is too short for its elements written with all the
//     fields this version knows (see decodeList), so that what a record
//     makes a reader allocate stays within a small multiple of its size.
package snapcodec

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"time"

	"github.com/nops-dev/nops/structs"
)

// deploymentFields and the other counts are the number of fields each
// struct has (but those the codec never writes, tagged codec:"-");
// TestSnapshotCodecCoversEveryField fails when a field is added to a
// struct and not here.
const (
	deploymentFields = 45
	frozenHookFields = 8
	hookRunFields    = 9
	decisionFields   = 4
	eventFields      = 12
	planDiffFields   = 5
	groupDiffFields  = 6
	taskDiffFields   = 5
	diffObjectFields = 4
	diffFieldFields  = 5
)

// AppendDeployment appends the msgpack array of a deployment.
func AppendDeployment(b []byte, d *structs.Deployment) ([]byte, error) {
	var err error
	b = mpArray(b, deploymentFields)
	b = mpString(b, d.ID)
	b = mpString(b, d.Namespace)
	b = mpString(b, d.JobID)
	b = mpString(b, d.Repository)
	b = mpString(b, d.Commit)
	b = mpString(b, d.File)
	b = mpString(b, string(d.Policy))
	b = mpString(b, string(d.State))
	b = mpString(b, d.SpecHash)
	b = mpBin(b, d.Spec)
	b = mpString(b, d.Diff)
	b = mpString(b, d.DiffHash)
	b = mpUint(b, d.JobModifyIndex)
	b = mpBool(b, d.SkipRegister)
	b = mpBool(b, d.LiftedWindow)
	b = mpString(b, d.LiftedBy)
	b = appendHooks(b, d.Hooks)
	if b, err = appendHookRuns(b, d.HookRuns); err != nil {
		return b, err
	}
	if b, err = appendDecisions(b, d.Decisions); err != nil {
		return b, err
	}
	if b, err = mpTime(b, d.RegisterStartedAt); err != nil {
		return b, err
	}
	b = mpBool(b, d.Registered)
	b = mpUint(b, d.JobVersion)
	b = mpString(b, d.NomadEvalID)
	b = mpString(b, d.NomadDeploymentID)
	if b, err = mpTime(b, d.HealthDeadline); err != nil {
		return b, err
	}
	b = mpInt(b, int64(d.ApplyTimeout))
	b = mpString(b, d.Error)
	for _, t := range []time.Time{d.CreatedAt, d.UpdatedAt, d.StateEnteredAt} {
		if b, err = mpTime(b, t); err != nil {
			return b, err
		}
	}
	b = mpUint(b, d.CreateIndex)
	b = mpUint(b, d.ModifyIndex)
	b = mpString(b, d.CommitMessage)
	b = mpString(b, d.CommitAuthor)
	if b, err = mpTime(b, d.CommitTime); err != nil {
		return b, err
	}
	b = mpString(b, d.CommitURL)
	b = mpString(b, d.FileDiff)
	b = mpInt(b, int64(d.ApprovalsRequired))
	b = mpInt(b, int64(d.ApprovalTTL))
	b = appendPlanDiff(b, d.PlanDiff)
	b = mpString(b, d.CommitCommitter)
	b = mpString(b, d.CommitSigner)
	b = mpString(b, d.Cluster)
	b = mpBool(b, d.SkipRequirements)
	return mpString(b, d.SkipRequirementsBy), nil
}

// appendPlanDiff appends a deployment's plan diff tree.
func appendPlanDiff(b []byte, p *structs.PlanDiff) []byte {
	if p == nil {
		return mpNil(b)
	}
	b = mpArray(b, planDiffFields)
	b = mpString(b, p.Type)
	b = mpString(b, p.ID)
	b = appendDiffFields(b, p.Fields)
	b = appendDiffObjects(b, p.Objects)
	if p.Groups == nil {
		return mpNil(b)
	}
	b = mpArray(b, len(p.Groups))
	for i := range p.Groups {
		g := &p.Groups[i]
		b = mpArray(b, groupDiffFields)
		b = mpString(b, g.Type)
		b = mpString(b, g.Name)
		b = mpStrings(b, g.Updates)
		b = appendDiffFields(b, g.Fields)
		b = appendDiffObjects(b, g.Objects)
		if g.Tasks == nil {
			b = mpNil(b)
			continue
		}
		b = mpArray(b, len(g.Tasks))
		for j := range g.Tasks {
			t := &g.Tasks[j]
			b = mpArray(b, taskDiffFields)
			b = mpString(b, t.Type)
			b = mpString(b, t.Name)
			b = mpStrings(b, t.Annotations)
			b = appendDiffFields(b, t.Fields)
			b = appendDiffObjects(b, t.Objects)
		}
	}
	return b
}

func appendDiffObjects(b []byte, objects []structs.DiffObject) []byte {
	if objects == nil {
		return mpNil(b)
	}
	b = mpArray(b, len(objects))
	for i := range objects {
		o := &objects[i]
		b = mpArray(b, diffObjectFields)
		b = mpString(b, o.Type)
		b = mpString(b, o.Name)
		b = appendDiffFields(b, o.Fields)
		b = appendDiffObjects(b, o.Objects)
	}
	return b
}

func appendDiffFields(b []byte, fields []structs.DiffField) []byte {
	if fields == nil {
		return mpNil(b)
	}
	b = mpArray(b, len(fields))
	for i := range fields {
		f := &fields[i]
		b = mpArray(b, diffFieldFields)
		b = mpString(b, f.Type)
		b = mpString(b, f.Name)
		b = mpString(b, f.Old)
		b = mpString(b, f.New)
		b = mpStrings(b, f.Annotations)
	}
	return b
}

// appendHooks appends a deployment's frozen hooks.
func appendHooks(b []byte, hooks []structs.FrozenHook) []byte {
	if hooks == nil {
		return mpNil(b)
	}
	b = mpArray(b, len(hooks))
	for i := range hooks {
		h := &hooks[i]
		b = mpArray(b, frozenHookFields)
		b = mpString(b, h.Name)
		b = mpString(b, string(h.Phase))
		b = mpInt(b, int64(h.Position))
		b = mpString(b, h.RevisionJobID)
		b = mpString(b, h.Hash)
		b = mpBin(b, h.Spec)
		b = mpInt(b, int64(h.Timeout))
		b = mpStrings(b, h.MetaKeys)
	}
	return b
}

// appendHookRuns appends a deployment's hook runs.
func appendHookRuns(b []byte, runs []structs.HookRun) ([]byte, error) {
	if runs == nil {
		return mpNil(b), nil
	}
	var err error
	b = mpArray(b, len(runs))
	for i := range runs {
		r := &runs[i]
		b = mpArray(b, hookRunFields)
		b = mpString(b, r.Hook)
		b = mpString(b, string(r.Phase))
		b = mpInt(b, int64(r.Position))
		b = mpString(b, r.Token)
		b = mpString(b, r.DispatchedJobID)
		b = mpString(b, string(r.State))
		b = mpString(b, r.Error)
		if b, err = mpTime(b, r.StartedAt); err != nil {
			return b, err
		}
		if b, err = mpTime(b, r.FinishedAt); err != nil {
			return b, err
		}
	}
	return b, nil
}

// appendDecisions appends a deployment's decisions.
func appendDecisions(b []byte, decisions []structs.Decision) ([]byte, error) {
	if decisions == nil {
		return mpNil(b), nil
	}
	var err error
	b = mpArray(b, len(decisions))
	for i := range decisions {
		c := &decisions[i]
		b = mpArray(b, decisionFields)
		b = mpString(b, c.Kind)
		b = mpString(b, c.Actor)
		b = mpString(b, c.Comment)
		if b, err = mpTime(b, c.Time); err != nil {
			return b, err
		}
	}
	return b, nil
}

// DecodeDeployment reads a deployment written by AppendDeployment. The
// strings it reads are set by r.Done.
func DecodeDeployment(r *Reader, d *structs.Deployment) error {
	return decodeFields(r, "deployment", d, decodeDeploymentField)
}

// decodeFields reads the array of the fields of v, a what, each with
// field, which skips a field this version does not know; nil is an error.
// An error names the field.
func decodeFields[T any](r *Reader, what string, v *T, field func(r *Reader, v *T, i int) error) error {
	n, err := r.arrayLen()
	if err != nil || n < 0 {
		return orNil(err, what)
	}
	for i := 0; i < n; i++ {
		if err := field(r, v, i); err != nil {
			return fmt.Errorf("%s field %d: %w", what, i, err)
		}
	}
	return nil
}

// decodeDeploymentField reads field i of a deployment: a table of the
// fields, in the order AppendDeployment writes them.
func decodeDeploymentField(r *Reader, d *structs.Deployment, i int) (err error) {
	switch i {
	case 0:
		err = r.strTo(&d.ID)
	case 1:
		err = r.symTo(&d.Namespace)
	case 2:
		err = r.strTo(&d.JobID)
	case 3:
		err = r.symTo(&d.Repository)
	case 4:
		err = r.symTo(&d.Commit)
	case 5:
		err = r.strTo(&d.File)
	case 6:
		err = r.symTo((*string)(&d.Policy))
	case 7:
		err = r.symTo((*string)(&d.State))
	case 8:
		err = r.strTo(&d.SpecHash)
	case 9:
		d.Spec, err = r.bytes()
	case 10:
		err = r.strTo(&d.Diff)
	case 11:
		err = r.strTo(&d.DiffHash)
	case 12:
		d.JobModifyIndex, err = r.uint()
	case 13:
		d.SkipRegister, err = r.bool()
	case 14:
		d.LiftedWindow, err = r.bool()
	case 15:
		err = r.symTo(&d.LiftedBy)
	case 16:
		d.Hooks, err = decodeList(r, 1+frozenHookFields, decodeFrozenHook)
	case 17:
		d.HookRuns, err = decodeList(r, 1+hookRunFields, decodeHookRun)
	case 18:
		d.Decisions, err = decodeList(r, 1+decisionFields, decodeDecision)
	case 19:
		d.RegisterStartedAt, err = r.time()
	case 20:
		d.Registered, err = r.bool()
	case 21:
		d.JobVersion, err = r.uint()
	case 22:
		err = r.strTo(&d.NomadEvalID)
	case 23:
		err = r.strTo(&d.NomadDeploymentID)
	case 24:
		d.HealthDeadline, err = r.time()
	case 25:
		err = r.durationTo(&d.ApplyTimeout)
	case 26:
		err = r.strTo(&d.Error)
	case 27:
		d.CreatedAt, err = r.time()
	case 28:
		d.UpdatedAt, err = r.time()
	case 29:
		d.StateEnteredAt, err = r.time()
	case 30:
		d.CreateIndex, err = r.uint()
	case 31:
		d.ModifyIndex, err = r.uint()
	case 32:
		err = r.strTo(&d.CommitMessage)
	case 33:
		err = r.symTo(&d.CommitAuthor)
	case 34:
		d.CommitTime, err = r.time()
	case 35:
		err = r.symTo(&d.CommitURL)
	case 36:
		err = r.strTo(&d.FileDiff)
	case 37:
		err = r.intTo(&d.ApprovalsRequired)
	case 38:
		err = r.durationTo(&d.ApprovalTTL)
	case 39:
		d.PlanDiff, err = decodePlanDiff(r)
	case 40:
		err = r.symTo(&d.CommitCommitter)
	case 41:
		err = r.symTo(&d.CommitSigner)
	case 42:
		err = r.symTo(&d.Cluster)
	case 43:
		d.SkipRequirements, err = r.bool()
	case 44:
		err = r.symTo(&d.SkipRequirementsBy)
	default:
		err = r.skip(0)
	}
	return err
}

func decodeFrozenHook(r *Reader, h *structs.FrozenHook) error {
	return decodeFields(r, "hook", h, decodeFrozenHookField)
}

func decodeFrozenHookField(r *Reader, h *structs.FrozenHook, i int) (err error) {
	switch i {
	case 0:
		err = r.symTo(&h.Name)
	case 1:
		err = r.symTo((*string)(&h.Phase))
	case 2:
		err = r.intTo(&h.Position)
	case 3:
		err = r.symTo(&h.RevisionJobID)
	case 4:
		err = r.symTo(&h.Hash)
	case 5:
		h.Spec, err = r.bytes()
	case 6:
		err = r.durationTo(&h.Timeout)
	case 7:
		h.MetaKeys, err = decodeList(r, 1, func(r *Reader, s *string) error { return r.symTo(s) })
	default:
		err = r.skip(0)
	}
	return err
}

func decodeHookRun(r *Reader, h *structs.HookRun) error {
	return decodeFields(r, "hook run", h, decodeHookRunField)
}

func decodeHookRunField(r *Reader, h *structs.HookRun, i int) (err error) {
	switch i {
	case 0:
		err = r.symTo(&h.Hook)
	case 1:
		err = r.symTo((*string)(&h.Phase))
	case 2:
		err = r.intTo(&h.Position)
	case 3:
		err = r.strTo(&h.Token)
	case 4:
		err = r.strTo(&h.DispatchedJobID)
	case 5:
		err = r.symTo((*string)(&h.State))
	case 6:
		err = r.strTo(&h.Error)
	case 7:
		h.StartedAt, err = r.time()
	case 8:
		h.FinishedAt, err = r.time()
	default:
		err = r.skip(0)
	}
	return err
}

func decodeDecision(r *Reader, c *structs.Decision) error {
	return decodeFields(r, "decision", c, decodeDecisionField)
}

func decodeDecisionField(r *Reader, c *structs.Decision, i int) (err error) {
	switch i {
	case 0:
		err = r.symTo(&c.Kind)
	case 1:
		err = r.symTo(&c.Actor)
	case 2:
		err = r.strTo(&c.Comment)
	case 3:
		c.Time, err = r.time()
	default:
		err = r.skip(0)
	}
	return err
}

// decodePlanDiff reads a plan diff tree, nil as nil.
func decodePlanDiff(r *Reader) (*structs.PlanDiff, error) {
	if r.takeNil() {
		return nil, nil
	}
	p := &structs.PlanDiff{}
	if err := decodeFields(r, "plan diff", p, decodePlanDiffField); err != nil {
		return nil, err
	}
	return p, nil
}

func decodePlanDiffField(r *Reader, p *structs.PlanDiff, i int) (err error) {
	switch i {
	case 0:
		err = r.symTo(&p.Type)
	case 1:
		err = r.symTo(&p.ID)
	case 2:
		p.Fields, err = decodeList(r, 1+diffFieldFields, decodeDiffField)
	case 3:
		p.Objects, err = decodeDiffObjects(r, 1)
	case 4:
		p.Groups, err = decodeList(r, 1+groupDiffFields, decodeGroupDiff)
	default:
		err = r.skip(0)
	}
	return err
}

func decodeGroupDiff(r *Reader, g *structs.GroupDiff) error {
	return decodeFields(r, "group diff", g, decodeGroupDiffField)
}

func decodeGroupDiffField(r *Reader, g *structs.GroupDiff, i int) (err error) {
	switch i {
	case 0:
		err = r.symTo(&g.Type)
	case 1:
		err = r.symTo(&g.Name)
	case 2:
		g.Updates, err = decodeList(r, 1, decodeSym)
	case 3:
		g.Fields, err = decodeList(r, 1+diffFieldFields, decodeDiffField)
	case 4:
		g.Objects, err = decodeDiffObjects(r, 1)
	case 5:
		g.Tasks, err = decodeList(r, 1+taskDiffFields, decodeTaskDiff)
	default:
		err = r.skip(0)
	}
	return err
}

func decodeTaskDiff(r *Reader, t *structs.TaskDiff) error {
	return decodeFields(r, "task diff", t, decodeTaskDiffField)
}

func decodeTaskDiffField(r *Reader, t *structs.TaskDiff, i int) (err error) {
	switch i {
	case 0:
		err = r.symTo(&t.Type)
	case 1:
		err = r.symTo(&t.Name)
	case 2:
		t.Annotations, err = decodeList(r, 1, decodeSym)
	case 3:
		t.Fields, err = decodeList(r, 1+diffFieldFields, decodeDiffField)
	case 4:
		t.Objects, err = decodeDiffObjects(r, 1)
	default:
		err = r.skip(0)
	}
	return err
}

// decodeDiffObjects reads the blocks of a diff at a depth; a tree nested
// deeper than structs.MaxDiffDepth is refused.
func decodeDiffObjects(r *Reader, depth int) ([]structs.DiffObject, error) {
	// Below the deepest blocks stands a nil: read it first.
	if r.takeNil() {
		return nil, nil
	}
	if depth > structs.MaxDiffDepth {
		return nil, errors.New("plan diff nested too deep")
	}
	return decodeList(r, 1+diffObjectFields, func(r *Reader, o *structs.DiffObject) error {
		return decodeFields(r, "diff object", o, func(r *Reader, o *structs.DiffObject, i int) (err error) {
			switch i {
			case 0:
				err = r.symTo(&o.Type)
			case 1:
				err = r.symTo(&o.Name)
			case 2:
				o.Fields, err = decodeList(r, 1+diffFieldFields, decodeDiffField)
			case 3:
				o.Objects, err = decodeDiffObjects(r, depth+1)
			default:
				err = r.skip(0)
			}
			return err
		})
	})
}

func decodeDiffField(r *Reader, f *structs.DiffField) error {
	return decodeFields(r, "diff field", f, decodeDiffFieldField)
}

func decodeDiffFieldField(r *Reader, f *structs.DiffField, i int) (err error) {
	switch i {
	case 0:
		err = r.symTo(&f.Type)
	case 1:
		err = r.symTo(&f.Name)
	case 2:
		err = r.strTo(&f.Old)
	case 3:
		err = r.strTo(&f.New)
	case 4:
		f.Annotations, err = decodeList(r, 1, decodeSym)
	default:
		err = r.skip(0)
	}
	return err
}

// decodeSym reads one interned string of a list.
func decodeSym(r *Reader, s *string) error { return r.symTo(s) }

// orNil returns err, or an error saying a nil stands where a what must be.
func orNil(err error, what string) error {
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s is nil", what)
}

// decodeList reads an array of elements with one, nil as a nil slice.
// Each element is written with minSize bytes at least: the elements are
// allocated at once (strTo keeps pointers to them), and a list that claims
// more than the record can hold is refused before, so that what a record
// makes the restore allocate stays within a small multiple of its size.
func decodeList[T any](r *Reader, minSize int, one func(*Reader, *T) error) ([]T, error) {
	n, err := r.arrayLen()
	if err != nil || n < 0 {
		return nil, err
	}
	if n > r.Rest()/minSize {
		return nil, fmt.Errorf("list of %d elements of %d bytes or more in the %d bytes left of the record", n, minSize, r.Rest())
	}
	out := make([]T, n)
	for i := range out {
		if err := one(r, &out[i]); err != nil {
			return nil, fmt.Errorf("element %d: %w", i, err)
		}
	}
	return out, nil
}

// AppendEvent appends the msgpack array of an event, as the event
// record has it.
func AppendEvent(b []byte, e *structs.Event) ([]byte, error) {
	var err error
	b = mpArray(b, eventFields)
	b = mpUint(b, e.Seq)
	if b, err = mpTime(b, e.Time); err != nil {
		return b, err
	}
	for _, s := range []string{e.Kind, e.Object, e.Namespace, e.JobID, e.From, e.To, e.Actor, e.Message} {
		b = mpString(b, s)
	}
	b = mpUint(b, e.Index)
	return mpString(b, e.Cluster), nil
}

// DecodeEvent reads an event written by AppendEvent, or by the codec
// from an event record. Anything but an array (a nil included) is an error.
func DecodeEvent(r *Reader, e *structs.Event) error {
	if r.i >= len(r.b) || !IsArray(r.b[r.i]) {
		return errors.New("event is not an array")
	}
	return decodeFields(r, "event", e, decodeEventField)
}

func decodeEventField(r *Reader, e *structs.Event, i int) (err error) {
	switch i {
	case 0:
		e.Seq, err = r.uint()
	case 1:
		e.Time, err = r.time()
	case 2:
		err = r.symTo(&e.Kind)
	case 3:
		err = r.symTo(&e.Object)
	case 4:
		err = r.symTo(&e.Namespace)
	case 5:
		err = r.symTo(&e.JobID)
	case 6:
		err = r.symTo(&e.From)
	case 7:
		err = r.symTo(&e.To)
	case 8:
		err = r.symTo(&e.Actor)
	case 9:
		err = r.symTo(&e.Message)
	case 10:
		e.Index, err = r.uint()
	case 11:
		err = r.symTo(&e.Cluster)
	default:
		err = r.skip(0)
	}
	return err
}

// IsArray reports whether b opens a msgpack array (fixarray, array
// 16 or array 32).
func IsArray(b byte) bool {
	return b&0xf0 == 0x90 || b == 0xdc || b == 0xdd
}

// The msgpack writers. They write the shortest form, as the codec does.

func mpNil(b []byte) []byte { return append(b, 0xc0) }

func mpBool(b []byte, v bool) []byte {
	if v {
		return append(b, 0xc3)
	}
	return append(b, 0xc2)
}

func mpArray(b []byte, n int) []byte {
	switch {
	case n < 16:
		return append(b, 0x90|byte(n))
	case n <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xdc), uint16(n))
	default:
		return binary.BigEndian.AppendUint32(append(b, 0xdd), uint32(n))
	}
}

func mpString(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n <= math.MaxUint8:
		b = append(b, 0xd9, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xda), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xdb), uint32(n))
	}
	return append(b, s...)
}

func mpStrings(b []byte, ss []string) []byte {
	if ss == nil {
		return mpNil(b)
	}
	b = mpArray(b, len(ss))
	for _, s := range ss {
		b = mpString(b, s)
	}
	return b
}

func mpBin(b []byte, p []byte) []byte {
	switch n := len(p); {
	case p == nil:
		return mpNil(b)
	case n <= math.MaxUint8:
		b = append(b, 0xc4, byte(n))
	case n <= math.MaxUint16:
		b = binary.BigEndian.AppendUint16(append(b, 0xc5), uint16(n))
	default:
		b = binary.BigEndian.AppendUint32(append(b, 0xc6), uint32(n))
	}
	return append(b, p...)
}

func mpUint(b []byte, v uint64) []byte {
	switch {
	case v < 0x80:
		return append(b, byte(v))
	case v <= math.MaxUint8:
		return append(b, 0xcc, byte(v))
	case v <= math.MaxUint16:
		return binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(v))
	case v <= math.MaxUint32:
		return binary.BigEndian.AppendUint32(append(b, 0xce), uint32(v))
	default:
		return binary.BigEndian.AppendUint64(append(b, 0xcf), v)
	}
}

func mpInt(b []byte, v int64) []byte {
	switch {
	case v >= 0:
		return mpUint(b, uint64(v))
	case v >= -32:
		return append(b, byte(v))
	case v >= math.MinInt8:
		return append(b, 0xd0, byte(v))
	case v >= math.MinInt16:
		return binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(v))
	case v >= math.MinInt32:
		return binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(v))
	default:
		return binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(v))
	}
}

// mpTime writes a time as the bin of its MarshalBinary form.
func mpTime(b []byte, t time.Time) ([]byte, error) {
	b = append(b, 0xc4, 0)
	start := len(b)
	b, err := t.AppendBinary(b)
	if err != nil {
		return b, fmt.Errorf("time %v: %w", t, err)
	}
	b[start-1] = byte(len(b) - start)
	return b, nil
}

// Reader reads msgpack values from one record. Every length is checked
// against what the record holds before anything is allocated for it. The
// zero Reader reads without interning; NewReader makes one that interns.
type Reader struct {
	b []byte
	i int
	// syms caches the short strings read by symTo, which repeat from
	// record to record (kinds, actors, states, namespaces, the IDs events
	// refer to): the restored state holds each once, and reading one again
	// costs a hash rather than an allocation. It is nil for a reader that
	// does not intern.
	syms *symCache
	// The strings strTo reads are gathered in arena, and cut from one
	// string when the record is done (see Done): one allocation a record
	// instead of one a string.
	arena   []byte
	pending []pendingString
}

type pendingString struct {
	dst      *string
	off, end int
}

// symCache is a direct-mapped cache of strings: a string takes the slot of
// its hash, and replaces what was there.
type symCache struct {
	seed  maphash.Seed
	slots [1 << 12]string
}

// maxSymLen bounds the strings symTo caches: longer ones rarely repeat.
const maxSymLen = 64

func newSymCache() *symCache { return &symCache{seed: maphash.MakeSeed()} }

// NewReader returns a Reader that interns the short strings it reads, for
// a reader of many records.
func NewReader() *Reader { return &Reader{syms: newSymCache()} }

var errShortRecord = errors.New("record ends inside a value")

// Reset starts reading the record b.
func (r *Reader) Reset(b []byte) {
	r.b, r.i = b, 0
	r.arena, r.pending = r.arena[:0], r.pending[:0]
}

// Rest returns how many bytes are left unread.
func (r *Reader) Rest() int { return len(r.b) - r.i }

func (r *Reader) next() (byte, error) {
	if r.i >= len(r.b) {
		return 0, errShortRecord
	}
	c := r.b[r.i]
	r.i++
	return c, nil
}

func (r *Reader) take(n int) ([]byte, error) {
	if n < 0 || n > len(r.b)-r.i {
		return nil, errShortRecord
	}
	p := r.b[r.i : r.i+n : r.i+n]
	r.i += n
	return p, nil
}

// be reads an n-byte big-endian number.
func (r *Reader) be(n int) (uint64, error) {
	p, err := r.take(n)
	if err != nil {
		return 0, err
	}
	var v uint64
	for _, c := range p {
		v = v<<8 | uint64(c)
	}
	return v, nil
}

// takeNil reports whether the next value is nil, and reads it if it is.
func (r *Reader) takeNil() bool {
	if r.i < len(r.b) && r.b[r.i] == 0xc0 {
		r.i++
		return true
	}
	return false
}

// arrayLen reads an array header and returns its length, or -1 for a nil.
func (r *Reader) arrayLen() (int, error) {
	c, err := r.next()
	if err != nil {
		return 0, err
	}
	var n uint64
	switch {
	case c == 0xc0:
		return -1, nil
	case c&0xf0 == 0x90:
		n = uint64(c & 0x0f)
	case c == 0xdc:
		n, err = r.be(2)
	case c == 0xdd:
		n, err = r.be(4)
	default:
		return 0, fmt.Errorf("want an array, found type byte 0x%02x", c)
	}
	if err != nil {
		return 0, err
	}
	// Each element takes a byte at least.
	if n > uint64(r.Rest()) {
		return 0, fmt.Errorf("array of %d elements in the %d bytes left of the record", n, r.Rest())
	}
	return int(n), nil
}

// raw reads a str or a bin and returns its bytes, or nil and false for a
// nil.
func (r *Reader) raw() ([]byte, bool, error) {
	c, err := r.next()
	if err != nil {
		return nil, false, err
	}
	var n uint64
	switch {
	case c == 0xc0:
		return nil, false, nil
	case c&0xe0 == 0xa0:
		n = uint64(c & 0x1f)
	case c == 0xd9 || c == 0xc4:
		n, err = r.be(1)
	case c == 0xda || c == 0xc5:
		n, err = r.be(2)
	case c == 0xdb || c == 0xc6:
		n, err = r.be(4)
	default:
		return nil, false, fmt.Errorf("want a string, found type byte 0x%02x", c)
	}
	if err != nil {
		return nil, false, err
	}
	p, err := r.take(int(n))
	return p, true, err
}

// symTo reads a string that is likely to repeat (see symCache).
func (r *Reader) symTo(s *string) error {
	p, _, err := r.raw()
	if err != nil {
		return err
	}
	switch {
	case len(p) == 0:
		*s = ""
	case r.syms == nil || len(p) > maxSymLen:
		*s = string(p)
	default:
		slot := &r.syms.slots[maphash.Bytes(r.syms.seed, p)&(uint64(len(r.syms.slots))-1)]
		if *slot != string(p) {
			*slot = string(p)
		}
		*s = *slot
	}
	return nil
}

// strTo reads a string into *s, which is set by Done.
func (r *Reader) strTo(s *string) error {
	p, _, err := r.raw()
	if err != nil {
		return err
	}
	if len(p) == 0 {
		*s = ""
		return nil
	}
	start := len(r.arena)
	r.arena = append(r.arena, p...)
	r.pending = append(r.pending, pendingString{s, start, len(r.arena)})
	return nil
}

// Done sets the strings strTo read, from one allocation.
func (r *Reader) Done() {
	if len(r.pending) == 0 {
		return
	}
	all := string(r.arena)
	for _, p := range r.pending {
		*p.dst = all[p.off:p.end]
	}
	r.arena, r.pending = r.arena[:0], r.pending[:0]
}

// bytes reads a bin (or str) into a new slice: nil for a nil, empty for
// an empty one.
func (r *Reader) bytes() ([]byte, error) {
	p, ok, err := r.raw()
	if err != nil || !ok {
		return nil, err
	}
	out := make([]byte, len(p))
	copy(out, p)
	return out, nil
}

// number reads an integer of any width; neg says it is negative, and v is
// then its two's complement.
func (r *Reader) number() (v uint64, neg bool, err error) {
	c, err := r.next()
	if err != nil {
		return 0, false, err
	}
	switch {
	case c == 0xc0:
		return 0, false, nil
	case c < 0x80:
		return uint64(c), false, nil
	case c >= 0xe0:
		return uint64(int64(int8(c))), true, nil
	case c >= 0xcc && c <= 0xcf:
		v, err = r.be(1 << (c - 0xcc))
		return v, false, err
	case c >= 0xd0 && c <= 0xd3:
		n := 1 << (c - 0xd0)
		v, err = r.be(n)
		if err != nil {
			return 0, false, err
		}
		// Sign-extend from n bytes.
		s := int64(v<<(64-8*n)) >> (64 - 8*n)
		return uint64(s), s < 0, nil
	}
	return 0, false, fmt.Errorf("want an integer, found type byte 0x%02x", c)
}

func (r *Reader) uint() (uint64, error) {
	v, neg, err := r.number()
	if err == nil && neg {
		err = fmt.Errorf("negative value %d for an unsigned field", int64(v))
	}
	return v, err
}

func (r *Reader) int64() (int64, error) {
	v, neg, err := r.number()
	if err == nil && !neg && v > math.MaxInt64 {
		err = fmt.Errorf("value %d overflows a signed field", v)
	}
	return int64(v), err
}

func (r *Reader) intTo(p *int) error {
	v, err := r.int64()
	if err == nil && (v > math.MaxInt || v < math.MinInt) {
		return fmt.Errorf("value %d overflows an int", v)
	}
	*p = int(v)
	return err
}

func (r *Reader) durationTo(p *time.Duration) error {
	v, err := r.int64()
	*p = time.Duration(v)
	return err
}

func (r *Reader) bool() (bool, error) {
	c, err := r.next()
	if err != nil {
		return false, err
	}
	switch c {
	case 0xc0, 0xc2:
		return false, nil
	case 0xc3:
		return true, nil
	}
	return false, fmt.Errorf("want a bool, found type byte 0x%02x", c)
}

// time reads a time written by mpTime; a nil is the zero time.
func (r *Reader) time() (time.Time, error) {
	var t time.Time
	p, ok, err := r.raw()
	if err != nil || !ok {
		return t, err
	}
	if err := t.UnmarshalBinary(p); err != nil {
		return t, fmt.Errorf("time: %w", err)
	}
	return t, nil
}

// maxSkipDepth bounds the nesting of a value skipped.
const maxSkipDepth = 32

// skip reads past one value of any type: a field this version does not
// know.
func (r *Reader) skip(depth int) error {
	if depth > maxSkipDepth {
		return errors.New("value nested too deep")
	}
	c, err := r.next()
	if err != nil {
		return err
	}
	var n uint64
	switch {
	case c < 0x80 || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		return nil
	case c&0xf0 == 0x80, c&0xf0 == 0x90, c == 0xdc, c == 0xdd, c == 0xde, c == 0xdf:
		// A map or an array: its elements follow.
		switch {
		case c&0xe0 == 0x80:
			n = uint64(c & 0x0f)
		case c == 0xdc || c == 0xde:
			n, err = r.be(2)
		default:
			n, err = r.be(4)
		}
		if err != nil {
			return err
		}
		if c&0xf0 == 0x80 || c == 0xde || c == 0xdf {
			n *= 2
		}
		if n > uint64(r.Rest()) {
			return fmt.Errorf("collection of %d values in the %d bytes left of the record", n, r.Rest())
		}
		for range n {
			if err := r.skip(depth + 1); err != nil {
				return err
			}
		}
		return nil
	case c&0xe0 == 0xa0:
		n = uint64(c & 0x1f)
	case c == 0xc4 || c == 0xd9:
		n, err = r.be(1)
	case c == 0xc5 || c == 0xda:
		n, err = r.be(2)
	case c == 0xc6 || c == 0xdb:
		n, err = r.be(4)
	case c == 0xc7, c == 0xc8, c == 0xc9:
		// ext 8, 16, 32: a length, a type byte and the data.
		n, err = r.be(1 << (c - 0xc7))
		n++
	case c == 0xca:
		n = 4
	case c == 0xcb:
		n = 8
	case c >= 0xcc && c <= 0xcf:
		n = 1 << (c - 0xcc)
	case c >= 0xd0 && c <= 0xd3:
		n = 1 << (c - 0xd0)
	case c >= 0xd4 && c <= 0xd8:
		// fixext 1 to 16: a type byte and the data.
		n = 1 + 1<<(c-0xd4)
	default:
		return fmt.Errorf("unknown type byte 0x%02x", c)
	}
	if err != nil {
		return err
	}
	if n > uint64(r.Rest()) {
		return errShortRecord
	}
	r.i += int(n)
	return nil
}
