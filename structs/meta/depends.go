package meta

import (
	"fmt"
	"sort"
	"strings"

	"github.com/nops-dev/nops/structs"
)

// Dependency is one job named by nops_depends_on (SPEC section 17): a job
// ID of the dependent's namespace (Namespace empty), or ns/job for one of
// another namespace.
type Dependency struct {
	Namespace string
	JobID     string
}

// Key returns the dependency's job key for a dependent of cluster and
// namespace: a dependency is always of its dependent's cluster.
func (d Dependency) Key(cluster, namespace string) string {
	if d.Namespace != "" {
		namespace = d.Namespace
	}
	return structs.JobKey(cluster, namespace, d.JobID)
}

// Dependencies returns the job keys the job depends on, in the declared
// order, for the job's own cluster and namespace.
func (j *Job) Dependencies(cluster, namespace string) []string {
	if len(j.DependsOn) == 0 {
		return nil
	}
	out := make([]string, 0, len(j.DependsOn))
	for _, d := range j.DependsOn {
		out = append(out, d.Key(cluster, namespace))
	}
	return out
}

// dependsOn reads nops_depends_on: a comma-separated list of job IDs, each
// optionally prefixed by its namespace and a slash. An empty name, a name
// with blanks or more than one slash, and a name given twice are problems.
func dependsOn(m map[string]string, bad func(string, string, string)) []Dependency {
	v, ok := m[KeyDependsOn]
	if !ok || strings.TrimSpace(v) == "" {
		return nil
	}
	var out []Dependency
	seen := map[Dependency]bool{}
	for _, part := range strings.Split(v, ",") {
		name := strings.TrimSpace(part)
		var d Dependency
		switch ns, job, slash := strings.Cut(name, "/"); {
		case name == "":
			bad(KeyDependsOn, v, "has an empty job name")
			continue
		case strings.ContainsAny(name, " \t\r\n"):
			bad(KeyDependsOn, v, fmt.Sprintf("job name %q has a blank in it", name))
			continue
		case slash && (ns == "" || job == "" || strings.Contains(job, "/")):
			bad(KeyDependsOn, v, fmt.Sprintf("%q is neither a job ID nor namespace/job", name))
			continue
		case slash:
			d = Dependency{Namespace: ns, JobID: job}
		default:
			d = Dependency{JobID: name}
		}
		if seen[d] {
			bad(KeyDependsOn, v, fmt.Sprintf("names %s twice", name))
			continue
		}
		seen[d] = true
		out = append(out, d)
	}
	return out
}

// DependencyNode is one managed job in a DependencyGraph: the file that
// declares it, its nops_depends_on as written and the job keys it names.
type DependencyNode struct {
	File      string
	Value     string
	DependsOn []string
}

// DependencyGraph is what the dependency rules judge: every managed job by
// job key, and the keys of the other jobs git declares (neither managed,
// or outside the managed namespaces), so that a dependency on one of those
// is worded as unmanaged rather than missing.
type DependencyGraph struct {
	Managed  map[string]DependencyNode
	Declared map[string]bool
}

// DependencyProblems returns, by job key, the validation problems of the
// managed jobs' dependencies (SPEC section 17), each naming the file, the
// key and the value: a dependency that no file declares (missing), one
// declared but not managed (unmanaged), and a dependency cycle, named whole
// from the job round to itself. Detection and `nops validate` both word
// them with it. Jobs without problems are absent from the answer.
func DependencyProblems(g DependencyGraph) map[string][]string {
	out := map[string][]string{}
	for _, key := range sortedKeys(g.Managed) {
		n := g.Managed[key]
		bad := func(why string) {
			out[key] = append(out[key], fmt.Sprintf("%s: meta %s = %q: %s", n.File, KeyDependsOn, n.Value, why))
		}
		for _, dep := range n.DependsOn {
			_, managed := g.Managed[dep]
			switch {
			case managed:
			case g.Declared[dep]:
				bad(fmt.Sprintf("%s is not a managed job (it has no nops_managed = \"true\", or its namespace is not managed)", dep))
			default:
				bad(fmt.Sprintf("%s is missing: no file declares it", dep))
			}
		}
		if cycle := g.cycleFrom(key); cycle != nil {
			bad("dependency cycle " + strings.Join(cycle, " -> "))
		}
	}
	return out
}

// cycleFrom returns the shortest dependency path from key back to itself
// (first and last element key), or nil when key is in no cycle. Edges are
// followed in declared order, so the answer is the same every time.
func (g DependencyGraph) cycleFrom(key string) []string {
	prev := map[string]string{}
	queue := []string{key}
	for len(queue) > 0 {
		at := queue[0]
		queue = queue[1:]
		for _, dep := range g.Managed[at].DependsOn {
			if _, ok := g.Managed[dep]; !ok {
				continue
			}
			if dep == key {
				path := []string{key}
				for n := at; n != key; n = prev[n] {
					path = append(path, n)
				}
				path = append(path, key)
				// path runs backwards from key: turn it round.
				for i, j := 0, len(path)-1; i < j; i, j = i+1, j-1 {
					path[i], path[j] = path[j], path[i]
				}
				return path
			}
			if _, seen := prev[dep]; !seen {
				prev[dep] = at
				queue = append(queue, dep)
			}
		}
	}
	return nil
}

// DependencyOrder returns the managed jobs' keys so that every job comes
// after the jobs it depends on, and otherwise in key order: the order
// detection takes jobs in, so that a job's dependencies are observed, and
// their deployments created, in the same cycle before it is. A cycle (a
// validation problem) is cut where the walk in key order first meets it;
// every job is in the answer once.
func DependencyOrder(g DependencyGraph) []string {
	keys := sortedKeys(g.Managed)
	out := make([]string, 0, len(keys))
	state := map[string]int{} // 1: on the path, 2: placed
	var visit func(string)
	visit = func(key string) {
		if state[key] != 0 {
			return
		}
		state[key] = 1
		for _, dep := range g.Managed[key].DependsOn {
			if _, ok := g.Managed[dep]; ok {
				visit(dep)
			}
		}
		state[key] = 2
		out = append(out, key)
	}
	for _, key := range keys {
		visit(key)
	}
	return out
}

func sortedKeys(m map[string]DependencyNode) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
