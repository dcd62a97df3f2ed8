package structs

// The types of a change in a plan diff, as Nomad names them.
const (
	DiffAdded   = "Added"
	DiffDeleted = "Deleted"
	DiffEdited  = "Edited"
	DiffNone    = "None"
)

// PlanDiff is the plan diff of a job as a tree, redacted before it is built:
// what a register would change, field by field (old and new value), grouped
// by the task group and task they belong to, with Nomad's annotations
// ("forces create/destroy update"). It holds what the text rendering
// (Deployment.Diff, `nomad job plan`) shows: an added or deleted job, group
// or task is named, its fields are not.
type PlanDiff struct {
	Type    string       `json:"type"`
	ID      string       `json:"id"`
	Fields  []DiffField  `json:"fields,omitempty"`
	Objects []DiffObject `json:"objects,omitempty"`
	Groups  []GroupDiff  `json:"groups,omitempty"`
}

// GroupDiff is the change of one task group.
type GroupDiff struct {
	Type string `json:"type"`
	Name string `json:"name"`
	// Updates are the scheduler's counts of what it would do to the
	// group's allocations, as Nomad's plan shows them ("1 create/destroy
	// update"), sorted.
	Updates []string     `json:"updates,omitempty"`
	Fields  []DiffField  `json:"fields,omitempty"`
	Objects []DiffObject `json:"objects,omitempty"`
	Tasks   []TaskDiff   `json:"tasks,omitempty"`
}

// TaskDiff is the change of one task.
type TaskDiff struct {
	Type string `json:"type"`
	Name string `json:"name"`
	// Annotations are Nomad's, such as "forces create/destroy update".
	Annotations []string     `json:"annotations,omitempty"`
	Fields      []DiffField  `json:"fields,omitempty"`
	Objects     []DiffObject `json:"objects,omitempty"`
}

// DiffObject is the change of a block (env, config, a template, ...), with
// the blocks inside it.
type DiffObject struct {
	Type    string       `json:"type"`
	Name    string       `json:"name"`
	Fields  []DiffField  `json:"fields,omitempty"`
	Objects []DiffObject `json:"objects,omitempty"`
}

// DiffField is the change of one field: its old and new value (empty for a
// value added or removed), redacted.
type DiffField struct {
	Type        string   `json:"type"`
	Name        string   `json:"name"`
	Old         string   `json:"old,omitempty"`
	New         string   `json:"new,omitempty"`
	Annotations []string `json:"annotations,omitempty"`
}

// MaxDiffDepth bounds the nesting of blocks in a plan diff: Nomad's job
// specification nests a few levels deep, and a deeper tree is refused when
// read back from a snapshot.
const MaxDiffDepth = 16

// Depth returns how deep the blocks of the tree nest: 0 with no block, 1
// with blocks that hold none. A tree deeper than MaxDiffDepth is refused.
func (p *PlanDiff) Depth() int {
	if p == nil {
		return 0
	}
	depth := objectsDepth(p.Objects)
	for _, g := range p.Groups {
		depth = max(depth, objectsDepth(g.Objects))
		for _, t := range g.Tasks {
			depth = max(depth, objectsDepth(t.Objects))
		}
	}
	return depth
}

func objectsDepth(objects []DiffObject) int {
	depth := 0
	for _, o := range objects {
		depth = max(depth, 1+objectsDepth(o.Objects))
	}
	return depth
}
