package nomadx

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"

	"github.com/hashicorp/nomad/api"
)

// SpecHash identifies the spec Nops would deploy for a managed job: the
// SHA-256 of the job's canonical JSON, with the counts of task groups that have
// a scaling block left out (they belong to the autoscaler) and every field
// Nomad fills in at registration or at run time cleared, followed by the given
// hook hashes in order. Two parses of the same file give the same hash.
func SpecHash(job *api.Job, hookHashes []string) string {
	h := sha256.New()
	h.Write(canonicalJob(job, true))
	for _, hh := range hookHashes {
		h.Write([]byte{0})
		h.Write([]byte("hook:"))
		h.Write([]byte(hh))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// JobHash is the SHA-256 of the job's canonical JSON with the fields Nomad
// fills in at registration or run time cleared (counts included). Nops uses it
// as a hook's revision.
func JobHash(job *api.Job) string {
	sum := sha256.Sum256(canonicalJob(job, false))
	return hex.EncodeToString(sum[:])
}

// canonicalJob returns the JSON of a deep copy of job with the server-set
// fields cleared and, when dropScaled is set, the counts of scaled groups
// removed. encoding/json writes struct fields in declaration order and map
// keys sorted, so equal specs give equal bytes.
func canonicalJob(job *api.Job, dropScaled bool) []byte {
	if job == nil {
		return []byte("null")
	}
	raw, err := json.Marshal(job)
	if err != nil {
		// api.Job holds only JSON-safe types; a failure here is a bug.
		panic("nomadx: marshal job: " + err.Error())
	}
	var c api.Job
	if err := json.Unmarshal(raw, &c); err != nil {
		panic("nomadx: unmarshal job: " + err.Error())
	}

	// Fields set by Nomad, not by the job file.
	c.Stop = nil
	c.ParentID = nil
	c.Dispatched = false
	c.DispatchIdempotencyToken = nil
	c.Payload = nil
	c.NomadTokenID = nil
	c.Status = nil
	c.StatusDescription = nil
	c.Stable = nil
	c.Version = nil
	c.SubmitTime = nil
	c.CreateIndex = nil
	c.ModifyIndex = nil
	c.JobModifyIndex = nil
	c.VersionTag = nil

	for _, tg := range c.TaskGroups {
		if tg == nil || tg.Scaling == nil {
			continue
		}
		if dropScaled {
			tg.Count = nil
		}
		tg.Scaling.ID = ""
		tg.Scaling.Namespace = ""
		tg.Scaling.Target = nil
		tg.Scaling.CreateIndex = 0
		tg.Scaling.ModifyIndex = 0
	}

	out, err := json.Marshal(&c)
	if err != nil {
		panic("nomadx: marshal job: " + err.Error())
	}
	return out
}

// DiffHash identifies what a plan would change: the SHA-256 of the diff with
// everything unchanged ("None") left out, as well as the scheduler's placement
// counts and annotations, which depend on the cluster rather than the spec.
// Used with KeepLiveCounts before planning, the count of a group left to an
// autoscaler never shows in it. A nil diff or a diff with no change hashes to
// the same value as an empty diff.
func DiffHash(diff *api.JobDiff) string {
	var d diffJob
	if diff != nil && diff.Type != DiffTypeNone {
		d = diffJob{Type: diff.Type, ID: diff.ID, Fields: diffFields(diff.Fields), Objects: diffObjects(diff.Objects)}
		for _, tg := range diff.TaskGroups {
			if tg == nil || tg.Type == DiffTypeNone || tg.Type == "" {
				continue
			}
			g := diffGroup{Type: tg.Type, Name: tg.Name, Fields: diffFields(tg.Fields), Objects: diffObjects(tg.Objects)}
			for _, t := range tg.Tasks {
				if t == nil || t.Type == DiffTypeNone || t.Type == "" {
					continue
				}
				g.Tasks = append(g.Tasks, diffTask{t.Type, t.Name, diffFields(t.Fields), diffObjects(t.Objects)})
			}
			sort.Slice(g.Tasks, func(i, j int) bool { return g.Tasks[i].Name < g.Tasks[j].Name })
			d.Groups = append(d.Groups, g)
		}
		sort.Slice(d.Groups, func(i, j int) bool { return d.Groups[i].Name < d.Groups[j].Name })
	}
	sum := sha256.Sum256(mustJSON(d))
	return hex.EncodeToString(sum[:])
}

// The canonical form of a plan's diff that DiffHash hashes: changes only,
// sorted. Their JSON is the hash's input, so their field names and order
// are part of every stored diff hash.
type (
	diffField struct {
		Type, Name, Old, New string
	}
	diffObject struct {
		Type, Name string
		Fields     []diffField
		Objects    []json.RawMessage
	}
	diffTask struct {
		Type, Name string
		Fields     []diffField
		Objects    []json.RawMessage
	}
	diffGroup struct {
		Type, Name string
		Fields     []diffField
		Objects    []json.RawMessage
		Tasks      []diffTask
	}
	diffJob struct {
		Type, ID string
		Fields   []diffField
		Objects  []json.RawMessage
		Groups   []diffGroup
	}
)

// mustJSON encodes the canonical diff, which always encodes.
func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic("nomadx: marshal diff: " + err.Error())
	}
	return b
}

// diffFields returns the changed fields, sorted.
func diffFields(in []*api.FieldDiff) []diffField {
	var out []diffField
	for _, f := range in {
		if f == nil || f.Type == DiffTypeNone || f.Type == "" {
			continue
		}
		out = append(out, diffField{f.Type, f.Name, f.Old, f.New})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Name != b.Name {
			return a.Name < b.Name
		}
		if a.Type != b.Type {
			return a.Type < b.Type
		}
		if a.Old != b.Old {
			return a.Old < b.Old
		}
		return a.New < b.New
	})
	return out
}

// diffObjects returns the changed objects, each encoded with its changes,
// sorted by their encoding.
func diffObjects(in []*api.ObjectDiff) []json.RawMessage {
	var out []json.RawMessage
	for _, o := range in {
		if o == nil || o.Type == DiffTypeNone || o.Type == "" {
			continue
		}
		out = append(out, mustJSON(diffObject{o.Type, o.Name, diffFields(o.Fields), diffObjects(o.Objects)}))
	}
	sort.Slice(out, func(i, j int) bool { return bytes.Compare(out[i], out[j]) < 0 })
	return out
}
