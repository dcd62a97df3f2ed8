package agenthttp

import (
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/nops-dev/nops/agent/acl"
	"github.com/nops-dev/nops/structs"
)

// clusterNames returns the names of the Nomad clusters the server is
// configured with (SPEC section 16), in configuration order: "default"
// alone without nomad blocks.
func (a *apiBase) clusterNames() []string {
	clusters := a.s.Config().Clusters()
	out := make([]string, 0, len(clusters))
	for _, c := range clusters {
		out = append(out, c.Name)
	}
	return out
}

// checkCluster refuses a Nomad cluster name the configuration does not
// have (400, naming the clusters); "" is no cluster and passes.
func (a *apiBase) checkCluster(name string) error {
	if name == "" {
		return nil
	}
	names := a.clusterNames()
	for _, n := range names {
		if n == name {
			return nil
		}
	}
	return badRequest(fmt.Sprintf("cluster: no Nomad cluster %q (the clusters are %s)", shownCluster(name), strings.Join(names, ", ")))
}

// shownCluster returns a cluster name read from a request as an answer
// quotes it: no longer than a cluster's name can be, so that a huge
// ?cluster= is not sent back whole.
func shownCluster(name string) string {
	if shown := structs.TruncateText(name, maxClusterNameLen); shown != name {
		return shown + "..."
	}
	return name
}

// maxClusterNameLen is the longest name a nomad block may have
// (config.checkClusterName).
const maxClusterNameLen = 63

// clusterFilter returns the ?cluster= filter of a list, checked.
func (a *apiBase) clusterFilter(r *http.Request) (string, error) {
	c := r.URL.Query().Get("cluster")
	return c, a.checkCluster(c)
}

// jobCluster resolves the Nomad cluster of the job a job route names by
// {ns} and {id}: the ?cluster= given, which must be configured; without
// one the only configured cluster, else the one cluster whose jobs hold
// that namespace and ID (the reconcilers' JobCluster, from the replicated
// state), or a 400 naming the clusters when several do or none of the
// configured ones does.
func (a *apiBase) jobCluster(r *http.Request) (string, error) {
	given := r.URL.Query().Get("cluster")
	if given != "" {
		return given, a.checkCluster(given)
	}
	names := a.clusterNames()
	if len(names) == 1 {
		return names[0], nil
	}
	ns, id := r.PathValue("ns"), r.PathValue("id")
	cluster := structs.DefaultCluster
	if rec := a.s.Reconciler(); rec != nil {
		c, err := rec.JobCluster("", ns, id)
		if err != nil {
			if errors.Is(err, structs.ErrInvalid) {
				return "", badRequest(err.Error())
			}
			return "", fmt.Errorf("resolve the cluster of job %s/%s: %w", ns, id, err)
		}
		cluster = c
	}
	if a.checkCluster(cluster) != nil {
		return "", badRequest(fmt.Sprintf("cluster: job %s/%s is in none of the Nomad clusters (%s): name one with ?cluster=",
			ns, id, strings.Join(names, ", ")))
	}
	return cluster, nil
}

// withJobCluster returns r with its ?cluster= set to the cluster of the
// job it names (jobCluster), so that the ACL check and the handler act on
// the same job.
func (a *apiBase) withJobCluster(r *http.Request) (*http.Request, error) {
	cluster, err := a.jobCluster(r)
	if err != nil {
		return nil, err
	}
	return setQuery(r, "cluster", cluster), nil
}

// setQuery returns a shallow copy of r whose query has key set to value.
func setQuery(r *http.Request, key, value string) *http.Request {
	q := r.URL.Query()
	if q.Get(key) == value {
		return r
	}
	q.Set(key, value)
	r2 := new(http.Request)
	*r2 = *r
	u := *r.URL
	u.RawQuery = q.Encode()
	r2.URL = &u
	return r2
}

// allowJobSomewhere reports whether pol holds c on the job ns/job in any
// configured Nomad cluster: whether a caller may learn where that job is
// (a 400 naming its clusters rather than a refusal).
func (a *apiBase) allowJobSomewhere(pol *acl.ACL, ns, job string, c acl.Capability) bool {
	for _, name := range a.clusterNames() {
		if pol.AllowJob(name, ns, job, c) {
			return true
		}
	}
	return false
}
