package web

import (
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/nops-dev/nops/structs"
)

// ClusterLink is a configured Nomad cluster as the dashboard links it:
// its name and its Nomad UI (ui_url, "" for none).
type ClusterLink struct {
	Name, UIURL string
}

// clusterView is what a page knows of the Nomad clusters Nops deploys to
// (SPEC section 16): those the configuration names (Config.Clusters), those
// the page's rows name and, on the pages that show a cluster's state
// (withStatus), GET /v1/clusters as the viewer may read it. It decides whether the page
// shows a cluster column and filter (Many), how a job's page and actions
// are addressed (with ?cluster= when the cluster matters) and where each
// cluster's Nomad UI is. With one cluster named default, the dashboard
// looks as it did before clusters: no column, no filter, job links
// without ?cluster=.
type clusterView struct {
	// List is GET /v1/clusters, nil on a page that does not show the
	// clusters' state, when the viewer may not read it or no server leads.
	List []*structs.ClusterStatus
	// ui is each configured cluster's Nomad UI.
	ui map[string]string
	// Names are the clusters known, sorted.
	Names []string
	// fallbackUI is the single-cluster Nomad UI address (Config.NomadUIURL),
	// the default cluster's when the list says nothing of it.
	fallbackUI string
	// forced shows the cluster column even with one cluster: a filter by
	// cluster is set, and the reader must be able to clear it.
	forced bool
}

// clusters is implemented by page data that carries the page's view of
// the clusters; render puts it on the page, where every template finds it.
type clusters interface{ clusterInfo() *clusterView }

// withClusters is embedded in the data of the pages that show jobs.
type withClusters struct{ C *clusterView }

func (w withClusters) clusterInfo() *clusterView { return w.C }

// clusterView is the configured clusters and those the page's rows name.
func (u *UI) clusterView(_ *http.Request, seen ...string) *clusterView {
	c := u.noClusters()
	if u.cfg.Clusters != nil {
		c.ui = map[string]string{}
		for _, l := range u.cfg.Clusters() {
			c.see(l.Name)
			c.ui[l.Name] = strings.TrimRight(l.UIURL, "/")
		}
	}
	for _, s := range seen {
		c.see(s)
	}
	return c
}

// withStatus adds GET /v1/clusters, read as the viewer (an error, such as
// a token without read on the cluster, leaves the list empty), for a page
// that shows the clusters' state: the leader answers it from every
// cluster's loops, so only those pages pay for it.
func (u *UI) withStatus(r *http.Request, c *clusterView) *clusterView {
	var list []*structs.ClusterStatus
	if err := u.get(r, "/v1/clusters", &list); err == nil {
		c.List = list
		for _, s := range list {
			c.see(s.Name)
		}
	}
	return c
}

// noClusters is the view of a page that reads no cluster: one default
// cluster, with the configured Nomad UI.
func (u *UI) noClusters() *clusterView {
	return &clusterView{fallbackUI: u.cfg.NomadUIURL}
}

// see notes a cluster a row names ("" is the default cluster).
func (c *clusterView) see(name string) {
	name = structs.ClusterName(name)
	if i, found := slices.BinarySearch(c.Names, name); !found {
		c.Names = slices.Insert(c.Names, i, name)
	}
}

// Many reports whether the page shows clusters: more than one, or one
// that is not the default (a configuration with a nomad block names its
// clusters), or a filter by cluster is set.
func (c *clusterView) Many() bool {
	return c.forced || len(c.Names) > 1 || (len(c.Names) == 1 && c.Names[0] != structs.DefaultCluster)
}

// Name is how a page writes a row's cluster.
func (c *clusterView) Name(cluster string) string { return structs.ClusterName(cluster) }

// query is the ?cluster= of a job's addresses: set when the cluster is not
// the default or when several clusters may hold the same namespace and ID.
// A row without a cluster (one written before clusters, such as an old
// event) is of the default cluster: among several it needs ?cluster= as
// much as one that says so, or the API cannot tell which job it is.
func (c *clusterView) query(cluster string) string {
	cluster = structs.ClusterName(cluster)
	if cluster == structs.DefaultCluster && !c.Many() {
		return ""
	}
	return "?cluster=" + url.QueryEscape(cluster)
}

// Job is the address of a job's page.
func (c *clusterView) Job(cluster, ns, id string) string {
	return "/ui/job/" + url.PathEscape(ns) + "/" + url.PathEscape(id) + c.query(cluster)
}

// JobAction is the address a form of a job's page posts to (pause,
// resume, retry, deploy-now).
func (c *clusterView) JobAction(cluster, ns, id, action string) string {
	return "/ui/job/" + url.PathEscape(ns) + "/" + url.PathEscape(id) + "/" + action + c.query(cluster)
}

// Jobs is the jobs list filtered by a cluster.
func (c *clusterView) Jobs(cluster string) string {
	return "/ui/jobs?cluster=" + url.QueryEscape(cluster)
}

// Status is the status of a cluster, or nil when the list does not have it.
func (c *clusterView) Status(cluster string) *structs.ClusterStatus {
	cluster = structs.ClusterName(cluster)
	for _, s := range c.List {
		if s.Name == cluster {
			return s
		}
	}
	return nil
}

// NomadUI is the base address of a cluster's Nomad UI (its ui_url), or ""
// when none is configured: the dashboard then shows no link to it.
func (c *clusterView) NomadUI(cluster string) string {
	if u, ok := c.ui[structs.ClusterName(cluster)]; ok {
		return u
	}
	if s := c.Status(cluster); s != nil {
		return strings.TrimRight(s.UIURL, "/")
	}
	if structs.ClusterName(cluster) == structs.DefaultCluster {
		return c.fallbackUI
	}
	return ""
}

// NomadJob links a job to its cluster's Nomad UI (/ui/jobs/<id>@<ns>), or
// "".
func (c *clusterView) NomadJob(cluster, ns, id string) string {
	base := c.NomadUI(cluster)
	if base == "" || id == "" {
		return ""
	}
	return base + "/ui/jobs/" + url.PathEscape(id+"@"+ns)
}

// NomadJobPage links a page of a job in the Nomad UI (allocations,
// versions, deployments), or "".
func (c *clusterView) NomadJobPage(cluster, ns, id, page string) string {
	if l := c.NomadJob(cluster, ns, id); l != "" {
		return l + "/" + page
	}
	return ""
}

// NomadGroup links a task group of a job in the Nomad UI, or "".
func (c *clusterView) NomadGroup(cluster, ns, id, group string) string {
	if l := c.NomadJob(cluster, ns, id); l != "" && group != "" {
		return l + "/" + url.PathEscape(group)
	}
	return ""
}

// NomadEval links an evaluation to the Nomad UI, or "".
func (c *clusterView) NomadEval(cluster, ns, id string) string {
	base := c.NomadUI(cluster)
	if base == "" || id == "" {
		return ""
	}
	return base + "/ui/evaluations?" + url.Values{"currentEval": {id}, "namespace": {ns}}.Encode()
}

// Has reports whether name is a cluster the page knows.
func (c *clusterView) Has(name string) bool {
	_, found := slices.BinarySearch(c.Names, name)
	return found
}
