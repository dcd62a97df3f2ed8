// Package redact removes secrets from Nomad job plan diffs, and from the
// text of job files and variables files (Source, for a deployment's file
// diff), before a diff is stored, shown, logged or sent anywhere.
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
//   - every field whose key looks secret is replaced by Redacted. The keys
//     are the ones an operator chooses: the [bracketed] map keys in a field's
//     name (`Env[DB_PASSWORD]`, `Meta[api_token]`, `auth[0][password]`) and
//     driver config attributes (`password`, `API_TOKEN`); a key looks secret
//     when it contains one of the fragments (see DefaultKeys), ignoring case.
//     Nomad's own field names (capitalised Go names such as `ErrMissingKey`)
//     are not operator keys and are left alone;
//   - every field inside an object whose key looks secret is replaced too;
//   - in every other value, the user info of a URL (`postgres://u:pw@db`,
//     `https://TOKEN@host`) and the value of a flag whose name looks secret
//     (`--password=pw`, `--token pw`, and a list element after a lone
//     `--token` element, as in driver `args`) are replaced.
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
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/hashicorp/nomad/api"
)

// Redacted replaces every secret value.
const Redacted = "(redacted)"

// embeddedTemplateField is the diff field Nomad uses for a template's inline
// `data`.
const embeddedTemplateField = "EmbeddedTmpl"

// driverConfigObject is the diff object of a task's driver config, whose
// attribute names are chosen by the operator (and the driver), not Nomad.
const driverConfigObject = "Config"

// DefaultKeys returns the fragments that make a key look secret. A key matches
// when it contains one of them, ignoring case. A new slice is returned on each
// call, so callers may append to it.
func DefaultKeys() []string {
	return []string{
		"password",
		"passwd",
		"pass",
		"pwd",
		"phrase",
		"secret",
		"token",
		"key",
		"credential",
		"private",
		"apikey",
		"auth",
		"cert",
		"dsn",
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

// IsSecretKey reports whether a field or object name from a diff holds an
// operator-chosen key that looks secret: one of its [bracketed] parts, or the
// name itself when it is not one of Nomad's capitalised field names, contains
// a secret fragment.
func (r *Redactor) IsSecretKey(name string) bool {
	base, rest, _ := strings.Cut(name, "[")
	if base != "" && !isNomadFieldName(base) && r.matches(base) {
		return true
	}
	for rest != "" {
		var part string
		part, rest, _ = strings.Cut(rest, "]")
		if r.matches(part) {
			return true
		}
		_, rest, _ = strings.Cut(rest, "[")
	}
	return false
}

func (r *Redactor) matches(key string) bool {
	lower := strings.ToLower(key)
	for _, f := range r.fragments {
		if strings.Contains(lower, f) {
			return true
		}
	}
	return false
}

// isNomadFieldName reports whether name is one of Nomad's struct field names
// (exported Go names start with an upper-case letter), as opposed to a key an
// operator wrote in a job file.
func isNomadFieldName(name string) bool {
	return name[0] >= 'A' && name[0] <= 'Z'
}

// Diff returns a redacted deep copy of diff. A nil diff gives nil.
func (r *Redactor) Diff(diff *api.JobDiff) *api.JobDiff {
	if diff == nil {
		return nil
	}
	out := &api.JobDiff{
		Type:    diff.Type,
		ID:      diff.ID,
		Fields:  r.fields(diff.Fields, false, false),
		Objects: r.objects(diff.Objects, false, false),
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
		Fields:  r.fields(tg.Fields, false, false),
		Objects: r.objects(tg.Objects, false, false),
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
				Fields:      r.fields(t.Fields, false, false),
				Objects:     r.objects(t.Objects, false, false),
				Annotations: cloneStrings(t.Annotations),
			})
		}
	}
	return out
}

// objects copies object diffs. secret: everything inside is secret.
// operator: the names inside are operator-chosen keys (driver config).
func (r *Redactor) objects(in []*api.ObjectDiff, secret, operator bool) []*api.ObjectDiff {
	if in == nil {
		return nil
	}
	out := make([]*api.ObjectDiff, 0, len(in))
	for _, o := range in {
		if o == nil {
			continue
		}
		inner := secret || r.isSecret(o.Name, operator)
		innerOperator := operator || o.Name == driverConfigObject
		out = append(out, &api.ObjectDiff{
			Type:    o.Type,
			Name:    o.Name,
			Fields:  r.fields(o.Fields, inner, innerOperator),
			Objects: r.objects(o.Objects, inner, innerOperator),
		})
	}
	return out
}

// isSecret is IsSecretKey, where operator says the whole name is an
// operator-chosen key whatever its case.
func (r *Redactor) isSecret(name string, operator bool) bool {
	if operator && r.matches(name) {
		return true
	}
	return r.IsSecretKey(name)
}

func (r *Redactor) fields(in []*api.FieldDiff, secret, operator bool) []*api.FieldDiff {
	if in == nil {
		return nil
	}
	out := make([]*api.FieldDiff, 0, len(in))
	secretArgs := r.argsAfterSecretFlags(in)
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
		if secret || f.Name == embeddedTemplateField || r.isSecret(f.Name, operator) || secretArgs[f.Name] {
			c.Old = mask(c.Old)
			c.New = mask(c.New)
		} else {
			c.Old = r.Value(c.Old)
			c.New = r.Value(c.New)
		}
		out = append(out, c)
	}
	return out
}

// argsAfterSecretFlags returns the names of the list elements that follow
// an element that is a secret flag on its own (`args = ["--token", "abc"]`
// is args[0] = "--token", args[1] = "abc"): their values are secret.
func (r *Redactor) argsAfterSecretFlags(in []*api.FieldDiff) map[string]bool {
	var out map[string]bool
	for _, f := range in {
		if f == nil {
			continue
		}
		base, idx, ok := listElement(f.Name)
		if !ok || !(r.isSecretFlag(f.Old) || r.isSecretFlag(f.New)) {
			continue
		}
		if out == nil {
			out = map[string]bool{}
		}
		out[fmt.Sprintf("%s[%d]", base, idx+1)] = true
	}
	return out
}

// listElement splits "args[3]" into "args" and 3.
func listElement(name string) (string, int, bool) {
	if !strings.HasSuffix(name, "]") {
		return "", 0, false
	}
	base, idx, ok := strings.Cut(name[:len(name)-1], "[")
	if !ok || strings.Contains(idx, "[") {
		return "", 0, false
	}
	n, err := strconv.Atoi(idx)
	if err != nil || n < 0 {
		return "", 0, false
	}
	return base, n, true
}

// isSecretFlag reports a command-line flag alone (no "=value") whose name
// looks secret: "--password", "-token".
func (r *Redactor) isSecretFlag(v string) bool {
	name, ok := strings.CutPrefix(v, "-")
	if !ok || strings.ContainsAny(v, "= \t") {
		return false
	}
	return r.matches(strings.TrimLeft(name, "-"))
}

// userinfo matches the user info of a URL anywhere in a value.
var userinfo = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.\-]*://)[^\s/@]+@`)

// flagValue matches a flag with its value in one word, "--name=value" or
// "-name=value", or as two words, "--name value".
var flagValue = regexp.MustCompile(`(^|\s)(--?[A-Za-z0-9_.\-]+)(=|\s+)(\S*)`)

// Value returns a value with what looks secret inside it hidden, whatever
// its key: the user info of a URL (postgres://user:pw@db/app) and the value
// of a flag whose name looks secret (--password=pw, --token pw).
func (r *Redactor) Value(v string) string {
	if v == "" {
		return v
	}
	if strings.Contains(v, "@") {
		v = userinfo.ReplaceAllString(v, "${1}"+Redacted+"@")
	}
	if strings.Contains(v, "-") {
		v = flagValue.ReplaceAllStringFunc(v, func(m string) string {
			sub := flagValue.FindStringSubmatch(m)
			if !r.matches(strings.TrimLeft(sub[2], "-")) || sub[4] == "" {
				return m
			}
			return sub[1] + sub[2] + sub[3] + Redacted
		})
	}
	return v
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
