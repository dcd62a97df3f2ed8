// Package redact removes secrets from Nomad job plan diffs before a diff is
// stored, shown, logged or sent anywhere.
//
// A plan diff from Nomad carries the old and new value of every changed field
// of a job, so it would otherwise carry whatever secrets an operator put into
// a job file: environment variables, meta, inline templates (which often
// render Vault secrets or Nomad variables), driver credentials.
//
// Guarantee: Diff returns a deep copy of the diff in which
//
//   - every template's embedded text (EmbeddedTmpl, the `data` of a template
//     block) is replaced by Redacted, whatever its key;
//   - every field whose name, or any [bracketed] map key in its name, contains
//     a secret-looking fragment (see DefaultKeys, case-insensitive) is replaced
//     by Redacted: `Env[DB_PASSWORD]`, `Meta[api_token]`,
//     `auth[0][password]`, ...;
//   - every field inside an object whose name looks secret is replaced too.
//
// The structure of the diff is kept: the type of each change (Added, Deleted,
// Edited) and the names of the fields stay visible, so a reader can still see
// that a secret changed, only not what it was or became. An empty value stays
// empty (it reveals nothing), so "added" and "removed" remain readable.
//
// Nomad variables and Vault secrets never appear in a job spec except through
// templates, which are always redacted entirely.
package redact

import (
	"strings"

	"github.com/hashicorp/nomad/api"
)

// Redacted replaces every secret value.
const Redacted = "(redacted)"

// embeddedTemplateField is the diff field Nomad uses for a template's inline
// `data`.
const embeddedTemplateField = "EmbeddedTmpl"

// DefaultKeys returns the fragments that make a key look secret. A key matches
// when it contains one of them, ignoring case. A new slice is returned on each
// call, so callers may append to it.
func DefaultKeys() []string {
	return []string{
		"password",
		"passwd",
		"secret",
		"token",
		"key",
		"credential",
		"private",
		"apikey",
		"auth",
		"cert",
	}
}

// Redactor decides which keys are secret. The zero value is not usable; build
// one with New.
type Redactor struct {
	fragments []string
}

// New returns a Redactor that matches DefaultKeys plus the given extra
// fragments. Extra fragments can only widen redaction, never narrow it; empty
// fragments are ignored.
func New(extra ...string) *Redactor {
	frags := DefaultKeys()
	for _, e := range extra {
		e = strings.ToLower(strings.TrimSpace(e))
		if e != "" {
			frags = append(frags, e)
		}
	}
	return &Redactor{fragments: frags}
}

// Diff returns a redacted deep copy of diff using DefaultKeys plus the extra
// fragments in keys. A nil diff gives nil. The input is never modified.
func Diff(diff *api.JobDiff, keys []string) *api.JobDiff {
	return New(keys...).Diff(diff)
}

// IsSecretKey reports whether a field or object name looks secret: the name
// itself or any [bracketed] part of it contains a secret fragment.
func (r *Redactor) IsSecretKey(name string) bool {
	lower := strings.ToLower(name)
	for _, f := range r.fragments {
		if strings.Contains(lower, f) {
			return true
		}
	}
	return false
}

// Diff returns a redacted deep copy of diff. A nil diff gives nil.
func (r *Redactor) Diff(diff *api.JobDiff) *api.JobDiff {
	if diff == nil {
		return nil
	}
	out := &api.JobDiff{
		Type:    diff.Type,
		ID:      diff.ID,
		Fields:  r.fields(diff.Fields, false),
		Objects: r.objects(diff.Objects, false),
	}
	if diff.TaskGroups != nil {
		out.TaskGroups = make([]*api.TaskGroupDiff, 0, len(diff.TaskGroups))
		for _, tg := range diff.TaskGroups {
			if tg == nil {
				continue
			}
			out.TaskGroups = append(out.TaskGroups, r.taskGroup(tg))
		}
	}
	return out
}

func (r *Redactor) taskGroup(tg *api.TaskGroupDiff) *api.TaskGroupDiff {
	out := &api.TaskGroupDiff{
		Type:    tg.Type,
		Name:    tg.Name,
		Fields:  r.fields(tg.Fields, false),
		Objects: r.objects(tg.Objects, false),
	}
	if tg.Updates != nil {
		out.Updates = make(map[string]uint64, len(tg.Updates))
		for k, v := range tg.Updates {
			out.Updates[k] = v
		}
	}
	if tg.Tasks != nil {
		out.Tasks = make([]*api.TaskDiff, 0, len(tg.Tasks))
		for _, t := range tg.Tasks {
			if t == nil {
				continue
			}
			out.Tasks = append(out.Tasks, &api.TaskDiff{
				Type:        t.Type,
				Name:        t.Name,
				Fields:      r.fields(t.Fields, false),
				Objects:     r.objects(t.Objects, false),
				Annotations: cloneStrings(t.Annotations),
			})
		}
	}
	return out
}

func (r *Redactor) objects(in []*api.ObjectDiff, secret bool) []*api.ObjectDiff {
	if in == nil {
		return nil
	}
	out := make([]*api.ObjectDiff, 0, len(in))
	for _, o := range in {
		if o == nil {
			continue
		}
		inner := secret || r.IsSecretKey(o.Name)
		out = append(out, &api.ObjectDiff{
			Type:    o.Type,
			Name:    o.Name,
			Fields:  r.fields(o.Fields, inner),
			Objects: r.objects(o.Objects, inner),
		})
	}
	return out
}

func (r *Redactor) fields(in []*api.FieldDiff, secret bool) []*api.FieldDiff {
	if in == nil {
		return nil
	}
	out := make([]*api.FieldDiff, 0, len(in))
	for _, f := range in {
		if f == nil {
			continue
		}
		c := &api.FieldDiff{
			Type:        f.Type,
			Name:        f.Name,
			Old:         f.Old,
			New:         f.New,
			Annotations: cloneStrings(f.Annotations),
		}
		if secret || f.Name == embeddedTemplateField || r.IsSecretKey(f.Name) {
			c.Old = mask(c.Old)
			c.New = mask(c.New)
		}
		out = append(out, c)
	}
	return out
}

// mask hides a value; an empty value stays empty because it reveals nothing
// and keeps additions and removals readable.
func mask(v string) string {
	if v == "" {
		return ""
	}
	return Redacted
}

func cloneStrings(in []string) []string {
	if in == nil {
		return nil
	}
	return append([]string(nil), in...)
}
