package web

import "testing"

// TestClusterView_JobAddress: among several clusters a job's addresses
// name its cluster, the default one too, and a row without a cluster (an
// event written before clusters) is the default cluster's; with one
// default cluster they look as before clusters.
func TestClusterView_JobAddress(t *testing.T) {
	many := &clusterView{}
	many.see("default")
	many.see("eu")
	one := &clusterView{}
	one.see("default")
	for _, c := range []struct {
		view          *clusterView
		cluster, want string
	}{
		{many, "eu", "/ui/job/default/web?cluster=eu"},
		{many, "default", "/ui/job/default/web?cluster=default"},
		{many, "", "/ui/job/default/web?cluster=default"},
		{one, "default", "/ui/job/default/web"},
		{one, "", "/ui/job/default/web"},
	} {
		if got := c.view.Job(c.cluster, "default", "web"); got != c.want {
			t.Errorf("the job of cluster %q among %v is at %q; want %q", c.cluster, c.view.Names, got, c.want)
		}
	}
}

// TestClusterView_FromConfiguration: a page knows the clusters and their
// Nomad UIs from the configuration in force, with no request to the API
// (this UI has no backend: a request would fail the test), so a viewer
// that may not read GET /v1/clusters still gets ?cluster= on a job of a
// cluster named default when another cluster exists.
func TestClusterView_FromConfiguration(t *testing.T) {
	u := &UI{cfg: Config{NomadUIURL: "https://single.example", Clusters: func() []ClusterLink {
		return []ClusterLink{{Name: "default", UIURL: "https://nomad.example/"}, {Name: "eu"}}
	}}}
	c := u.clusterView(nil)
	if !c.Many() || c.Job("", "default", "web") != "/ui/job/default/web?cluster=default" {
		t.Fatalf("two configured clusters: many %v, job address %q", c.Many(), c.Job("", "default", "web"))
	}
	if got := c.NomadJob("default", "default", "web"); got != "https://nomad.example/ui/jobs/web@default" {
		t.Errorf("default's Nomad link %q, want its configured ui_url", got)
	}
	if got := c.NomadJob("eu", "default", "web"); got != "" {
		t.Errorf("eu, with no ui_url, links %q; want no link", got)
	}
	one := (&UI{cfg: Config{NomadUIURL: "https://single.example"}}).clusterView(nil)
	if one.Many() || one.NomadJob("", "default", "web") != "https://single.example/ui/jobs/web@default" {
		t.Errorf("one default cluster: many %v, Nomad link %q", one.Many(), one.NomadJob("", "default", "web"))
	}
}
