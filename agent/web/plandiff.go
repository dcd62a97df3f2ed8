package web

import (
	"html/template"
	"strconv"
	"strings"

	"github.com/nops-dev/nops/structs"
)

// diffFuncs are the template functions of the plan diff tree and of a
// job's health (templates/partials).
func diffFuncs() template.FuncMap {
	return template.FuncMap{
		"diffClass":     diffClass,
		"diffWord":      diffWord,
		"diffSign":      diffSign,
		"diffForces":    diffForces,
		"diffForcesOne": forcesOne,
		"healthClass":   healthClass,
		"healthCounts":  healthCounts,
	}
}

// healthClass is the badge class of a job's health.
func healthClass(state string) string {
	switch state {
	case "healthy", "completed":
		return "ok"
	case "degraded":
		return "bad"
	case "progressing":
		return "warn"
	}
	return "muted"
}

// healthCounts says a job's allocation counts in words, leaving out the
// kinds it has none of but running, healthy and failed.
func healthCounts(h *structs.JobHealth) string {
	if h == nil {
		return ""
	}
	parts := []string{strconv.Itoa(h.Running) + " running", strconv.Itoa(h.Healthy) + " healthy"}
	if h.Unhealthy > 0 {
		parts = append(parts, strconv.Itoa(h.Unhealthy)+" unhealthy")
	}
	if h.Pending > 0 {
		parts = append(parts, strconv.Itoa(h.Pending)+" pending")
	}
	if h.Complete > 0 {
		parts = append(parts, strconv.Itoa(h.Complete)+" complete")
	}
	return strings.Join(append(parts, strconv.Itoa(h.Failed)+" failed"), ", ")
}

// diffClass is the CSS class of a change: add, del, edit or same.
func diffClass(typ string) string {
	switch typ {
	case structs.DiffAdded:
		return "add"
	case structs.DiffDeleted:
		return "del"
	case structs.DiffEdited:
		return "edit"
	}
	return "same"
}

// diffWord names a change for a reader, a screen reader too.
func diffWord(typ string) string {
	switch typ {
	case structs.DiffAdded:
		return "added"
	case structs.DiffDeleted:
		return "removed"
	case structs.DiffEdited:
		return "changed"
	}
	return "unchanged"
}

// diffSign is the marker of a change, as plans show it.
func diffSign(typ string) string {
	switch typ {
	case structs.DiffAdded:
		return "+"
	case structs.DiffDeleted:
		return "-"
	case structs.DiffEdited:
		return "~"
	}
	return " "
}

// forcesOne reports whether an annotation or a scheduler count creates or
// destroys allocations ("forces create/destroy update", "1 create"), as
// opposed to an in-place update.
func forcesOne(s string) bool {
	return strings.Contains(s, "create") || strings.Contains(s, "destroy")
}

// diffForces lists where a plan creates or destroys allocations, for the
// call-out above the tree: "group web, task web: forces create/destroy
// update".
func diffForces(p *structs.PlanDiff) []string {
	if p == nil {
		return nil
	}
	var out []string
	add := func(where string, annotations []string) {
		for _, a := range annotations {
			if forcesOne(a) {
				out = append(out, where+": "+a)
			}
		}
	}
	for _, g := range p.Groups {
		where := "group " + g.Name
		for _, f := range g.Fields {
			add(where+", "+f.Name, f.Annotations)
		}
		for _, t := range g.Tasks {
			add(where+", task "+t.Name, t.Annotations)
			for _, f := range t.Fields {
				add(where+", task "+t.Name+", "+f.Name, f.Annotations)
			}
		}
	}
	return out
}
