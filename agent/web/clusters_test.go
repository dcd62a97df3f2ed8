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
