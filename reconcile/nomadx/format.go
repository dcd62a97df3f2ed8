package nomadx

import (
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/structs"
)

// FormatDiff renders a job diff like `nomad job plan` does, without colour:
//
//	+/- Job: "web"
//	+/- Task Group: "web" (1 create/destroy update)
//	  +/- Task: "web" (forces create/destroy update)
//	    +/- Env[LEVEL]: "info" => "debug"
//
// When verbose is false, added and deleted groups and tasks are shown by name
// only, as Nomad does. The output depends only on the diff. Pass a redacted
// diff (redact.Diff) for anything a person or a log will see.
func FormatDiff(diff *api.JobDiff, verbose bool) string {
	if diff == nil {
		return ""
	}
	var b strings.Builder
	marker, _ := diffMarker(diff.Type)
	fmt.Fprintf(&b, "%sJob: %q\n", marker, diff.ID)

	longestField, longestMarker := longestPrefixes(diff.Fields, diff.Objects)
	for _, tg := range diff.TaskGroups {
		if _, l := diffMarker(tg.Type); l > longestMarker {
			longestMarker = l
		}
	}
	if diff.Type == DiffTypeEdited || verbose {
		fo := alignedFieldsAndObjects(diff.Fields, diff.Objects, 0, longestField, longestMarker)
		b.WriteString(fo)
		if fo != "" {
			b.WriteString("\n")
		}
	}
	for _, tg := range diff.TaskGroups {
		_, l := diffMarker(tg.Type)
		b.WriteString(formatTaskGroupDiff(tg, longestMarker-l, verbose))
		b.WriteString("\n")
	}
	return strings.TrimRight(b.String(), "\n") + "\n"
}

// Tree returns a job diff as a tree (structs.PlanDiff) that holds what
// FormatDiff(diff, false) shows: the fields and blocks of a changed job,
// group or task, and only the name of an added or deleted one. Pass a
// redacted diff (redact.Diff): the tree is stored and shown. Blocks nested
// deeper than structs.MaxDiffDepth are left out.
func Tree(diff *api.JobDiff) *structs.PlanDiff {
	if diff == nil {
		return nil
	}
	out := &structs.PlanDiff{Type: diff.Type, ID: diff.ID}
	out.Fields, out.Objects = editedTree(diff.Type, diff.Fields, diff.Objects)
	for _, tg := range diff.TaskGroups {
		if tg == nil {
			continue
		}
		g := structs.GroupDiff{Type: tg.Type, Name: tg.Name, Updates: groupUpdates(tg.Updates)}
		g.Fields, g.Objects = editedTree(tg.Type, tg.Fields, tg.Objects)
		for _, t := range tg.Tasks {
			if t == nil {
				continue
			}
			task := structs.TaskDiff{Type: t.Type, Name: t.Name, Annotations: cloneStrings(t.Annotations)}
			task.Fields, task.Objects = editedTree(t.Type, t.Fields, t.Objects)
			g.Tasks = append(g.Tasks, task)
		}
		out.Groups = append(out.Groups, g)
	}
	return out
}

// editedTree is the fields and blocks Tree keeps of a job, group or task
// diff of type typ: those of a changed one, none of an added or deleted one.
func editedTree(typ string, fields []*api.FieldDiff, objects []*api.ObjectDiff) ([]structs.DiffField, []structs.DiffObject) {
	if typ != DiffTypeEdited {
		return nil, nil
	}
	return treeFields(fields), treeObjects(objects, 1)
}

func treeFields(in []*api.FieldDiff) []structs.DiffField {
	var out []structs.DiffField
	for _, f := range in {
		if f != nil {
			out = append(out, structs.DiffField{Type: f.Type, Name: f.Name, Old: f.Old, New: f.New, Annotations: cloneStrings(f.Annotations)})
		}
	}
	return out
}

func treeObjects(in []*api.ObjectDiff, depth int) []structs.DiffObject {
	if depth > structs.MaxDiffDepth {
		return nil
	}
	var out []structs.DiffObject
	for _, o := range in {
		if o != nil {
			out = append(out, structs.DiffObject{Type: o.Type, Name: o.Name, Fields: treeFields(o.Fields), Objects: treeObjects(o.Objects, depth+1)})
		}
	}
	return out
}

// groupUpdates renders a group's scheduler counts as FormatDiff does:
// "1 create/destroy update", sorted by kind.
func groupUpdates(updates map[string]uint64) []string {
	if len(updates) == 0 {
		return nil
	}
	kinds := make([]string, 0, len(updates))
	for k := range updates {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	out := make([]string, 0, len(kinds))
	for _, k := range kinds {
		out = append(out, fmt.Sprintf("%d %s", updates[k], k))
	}
	return out
}

func cloneStrings(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	return append([]string(nil), in...)
}

func formatTaskGroupDiff(tg *api.TaskGroupDiff, prefix int, verbose bool) string {
	var b strings.Builder
	marker, _ := diffMarker(tg.Type)
	fmt.Fprintf(&b, "%s%sTask Group: %q", marker, strings.Repeat(" ", prefix), tg.Name)
	if updates := groupUpdates(tg.Updates); len(updates) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(updates, ", "))
	}
	b.WriteString("\n")

	longestField, longestMarker := longestPrefixes(tg.Fields, tg.Objects)
	for _, t := range tg.Tasks {
		if _, l := diffMarker(t.Type); l > longestMarker {
			longestMarker = l
		}
	}
	sub := prefix + 2
	if tg.Type == DiffTypeEdited || verbose {
		fo := alignedFieldsAndObjects(tg.Fields, tg.Objects, sub, longestField, longestMarker)
		b.WriteString(fo)
		if fo != "" {
			b.WriteString("\n")
		}
	}
	for _, t := range tg.Tasks {
		_, l := diffMarker(t.Type)
		b.WriteString(formatTaskDiff(t, sub, longestMarker-l, verbose))
		b.WriteString("\n")
	}
	return b.String()
}

func formatTaskDiff(t *api.TaskDiff, start, prefix int, verbose bool) string {
	var b strings.Builder
	marker, _ := diffMarker(t.Type)
	fmt.Fprintf(&b, "%s%s%sTask: %q", strings.Repeat(" ", start), marker, strings.Repeat(" ", prefix), t.Name)
	if len(t.Annotations) > 0 {
		fmt.Fprintf(&b, " (%s)", strings.Join(t.Annotations, ", "))
	}
	if t.Type == DiffTypeNone || ((t.Type == DiffTypeAdded || t.Type == DiffTypeDeleted) && !verbose) {
		return b.String()
	}
	b.WriteString("\n")
	longestField, longestMarker := longestPrefixes(t.Fields, t.Objects)
	b.WriteString(alignedFieldsAndObjects(t.Fields, t.Objects, start+2, longestField, longestMarker))
	return b.String()
}

func formatObjectDiff(o *api.ObjectDiff, start, prefix int) string {
	var b strings.Builder
	marker, markerLen := diffMarker(o.Type)
	fmt.Fprintf(&b, "%s%s%s%s {\n", strings.Repeat(" ", start), marker, strings.Repeat(" ", prefix), o.Name)
	longestField, longestMarker := longestPrefixes(o.Fields, o.Objects)
	b.WriteString(alignedFieldsAndObjects(o.Fields, o.Objects, start+prefix+2, longestField, longestMarker))
	fmt.Fprintf(&b, "\n%s}", strings.Repeat(" ", start+markerLen+prefix))
	return b.String()
}

func formatFieldDiff(f *api.FieldDiff, start, keyPrefix, valuePrefix int) string {
	marker, _ := diffMarker(f.Type)
	out := fmt.Sprintf("%s%s%s%s: %s", strings.Repeat(" ", start), marker,
		strings.Repeat(" ", keyPrefix), f.Name, strings.Repeat(" ", valuePrefix))
	switch f.Type {
	case DiffTypeAdded:
		out += fmt.Sprintf("%q", f.New)
	case DiffTypeDeleted:
		out += fmt.Sprintf("%q", f.Old)
	case DiffTypeEdited:
		out += fmt.Sprintf("%q => %q", f.Old, f.New)
	default:
		out += fmt.Sprintf("%q", f.New)
	}
	if len(f.Annotations) > 0 {
		out += fmt.Sprintf(" (%s)", strings.Join(f.Annotations, ", "))
	}
	return out
}

func alignedFieldsAndObjects(fields []*api.FieldDiff, objects []*api.ObjectDiff, start, longestField, longestMarker int) string {
	var b strings.Builder
	for i, f := range fields {
		_, l := diffMarker(f.Type)
		b.WriteString(formatFieldDiff(f, start, longestMarker-l, longestField-len(f.Name)))
		if i+1 != len(fields) || len(objects) > 0 {
			b.WriteString("\n")
		}
	}
	for i, o := range objects {
		_, l := diffMarker(o.Type)
		b.WriteString(formatObjectDiff(o, start, longestMarker-l))
		if i+1 != len(objects) {
			b.WriteString("\n")
		}
	}
	return b.String()
}

func longestPrefixes(fields []*api.FieldDiff, objects []*api.ObjectDiff) (longestField, longestMarker int) {
	for _, f := range fields {
		if l := len(f.Name); l > longestField {
			longestField = l
		}
		if _, l := diffMarker(f.Type); l > longestMarker {
			longestMarker = l
		}
	}
	for _, o := range objects {
		if _, l := diffMarker(o.Type); l > longestMarker {
			longestMarker = l
		}
	}
	return longestField, longestMarker
}

func diffMarker(diffType string) (string, int) {
	switch diffType {
	case DiffTypeAdded:
		return "+ ", 2
	case DiffTypeDeleted:
		return "- ", 2
	case DiffTypeEdited:
		return "+/- ", 4
	default:
		return "", 0
	}
}

// pruneEmptyEdits downgrades to "None" every object, task, group and job
// that Nomad marks "Edited" although nothing in it changed, and drops such
// objects. Nomad does this for a group's scaling block: its policy carries
// server-side indexes that a parsed job lacks, so every plan of a job with a
// scaling block would otherwise look like a change.
func pruneEmptyEdits(d *api.JobDiff) {
	if d == nil {
		return
	}
	d.Objects = pruneObjects(d.Objects)
	groupsChanged := false
	for _, tg := range d.TaskGroups {
		if tg == nil {
			continue
		}
		tg.Objects = pruneObjects(tg.Objects)
		tasksChanged := false
		for _, t := range tg.Tasks {
			if t == nil {
				continue
			}
			t.Objects = pruneObjects(t.Objects)
			if t.Type == DiffTypeEdited && !fieldsChanged(t.Fields) && !objectsChanged(t.Objects) {
				t.Type = DiffTypeNone
			}
			tasksChanged = tasksChanged || t.Type != DiffTypeNone
		}
		if tg.Type == DiffTypeEdited && !tasksChanged && !fieldsChanged(tg.Fields) && !objectsChanged(tg.Objects) {
			tg.Type = DiffTypeNone
		}
		groupsChanged = groupsChanged || tg.Type != DiffTypeNone
	}
	if d.Type == DiffTypeEdited && !groupsChanged && !fieldsChanged(d.Fields) && !objectsChanged(d.Objects) {
		d.Type = DiffTypeNone
	}
}

func pruneObjects(in []*api.ObjectDiff) []*api.ObjectDiff {
	if in == nil {
		return nil
	}
	out := in[:0]
	for _, o := range in {
		if o == nil {
			continue
		}
		o.Objects = pruneObjects(o.Objects)
		if o.Type == DiffTypeEdited && !fieldsChanged(o.Fields) && !objectsChanged(o.Objects) {
			continue
		}
		out = append(out, o)
	}
	return out
}

func fieldsChanged(fields []*api.FieldDiff) bool {
	for _, f := range fields {
		if f != nil && f.Type != DiffTypeNone && f.Type != "" {
			return true
		}
	}
	return false
}

func objectsChanged(objects []*api.ObjectDiff) bool {
	for _, o := range objects {
		if o != nil && o.Type != DiffTypeNone && o.Type != "" {
			return true
		}
	}
	return false
}
