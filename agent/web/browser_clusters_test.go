package web_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// clusterStatus stores a job's observed status in a cluster, changed by
// each change given.
func clusterStatus(t *testing.T, s *nopstest.Server, cluster, job string, sync structs.SyncState, change ...func(*structs.JobStatus)) {
	t.Helper()
	st := &structs.JobStatus{Cluster: cluster, Namespace: "default", JobID: job, Repository: cluster + "-jobs",
		File: cluster + "/" + job + ".nomad.hcl", Commit: strings.Repeat("cd", 20), Policy: structs.PolicyApproval,
		Sync: sync, ObservedAt: time.Now().UTC()}
	for _, c := range change {
		c(st)
	}
	apply(t, s, structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{WriteMeta: systemMeta(), Statuses: []*structs.JobStatus{st}})
}

// markPage marks the page in the browser, and liveMarked is true while
// the page is the one marked: a live update changed what the page shows,
// not a reload or a navigation.
func markPage(b *browser) {
	b.t.Helper()
	if _, err := eval[bool](b, `(() => { window.nopsMarked = true; return true; })()`); err != nil {
		b.t.Fatal(err)
	}
}

const liveMarked = `window.nopsMarked === true`

// hangingValues lists the cells of the clusters' cards (a phone's layout)
// whose value wraps to under its label rather than under itself: a
// wrapped ":4646" under "Address" reads as a label of its own.
const hangingValues = `Array.from(document.querySelectorAll("table.cards td:not(.name)")).filter(td => {
	const r = document.createRange(); r.selectNodeContents(td);
	const lefts = Array.from(r.getClientRects()).filter(x => x.width > 0).map(x => x.left);
	return lefts.length > 1 && Math.min(...lefts) < lefts[0] - 1;
}).map(td => td.closest("tr").id + " " + td.dataset.label).join(", ")`

// fileDiffIn is a file diff of web in a cluster.
func fileDiffIn(cluster string) string {
	return "--- a/" + cluster + "/web.nomad.hcl\n+++ b/" + cluster + "/web.nomad.hcl\n@@ -1 +1 @@\n-count = 1\n+count = 2\n"
}

// rowTexts lists, for each row of a table body, its cells' text joined by
// "|".
func rowTexts(b *browser, sel string) string {
	v, _ := eval[string](b, `Array.from(document.querySelectorAll(`+jsString(sel)+`)).filter(r => !r.hidden).map(r =>
		Array.from(r.cells).map(c => c.textContent.trim().replace(/\s+/g, " ")).join("|")).join("\n")`)
	return v
}

// brokenAddresses lists the parts of the addresses of Nomad clusters
// (code.addr) that wrap inside: a host label or a port split over two
// lines.
const brokenAddresses = `(() => {
	const bad = [];
	for (const code of document.querySelectorAll("code.addr")) {
		const walk = document.createTreeWalker(code, NodeFilter.SHOW_TEXT);
		for (let n = walk.nextNode(); n; n = walk.nextNode()) {
			const re = /[A-Za-z0-9-]+/g;
			for (let m = re.exec(n.data); m; m = re.exec(n.data)) {
				const r = document.createRange();
				r.setStart(n, m.index); r.setEnd(n, m.index + m[0].length);
				const tops = Array.from(r.getClientRects()).filter(x => x.width > 0).map(x => x.top);
				if (tops.length > 1 && Math.max(...tops) - Math.min(...tops) > 4) bad.push(m[0]);
			}
		}
	}
	return bad.join(" ");
})()`

// TestDashboard_Clusters: a server that deploys to two Nomad clusters, eu
// and us, both unreachable (nothing listens at their addresses), with
// the job web in each. The jobs list shows a cluster column and a filter
// by cluster that narrows it; web in eu and web in us link to two pages
// (?cluster=), each showing its own cluster, status and Nomad UI (eu's
// ui_url; us has none), and each page's actions act on its own cluster's
// job only; the overview lists both clusters unreachable, with us's
// promotion order, each linked to its jobs; the overview's, approvals'
// and deployments' tables show the cluster, and the deployments page
// filters by it. The overview's Nomad panels poll (reachability changes
// without a write), and on a phone a cluster card's values wrap under
// themselves, not under their labels. The approvals' file diffs and the
// confirmation of a rejection name the job's cluster. Live updates of the
// audit log, the jobs list and a job's page (web in us held by the
// promotion order: "waiting for staging …") keep the cluster column, the
// cluster and every ?cluster=. Every page is checked and shot at 1280 and
// 390 pixels. A server with its one default cluster shows none of it.
func TestDashboard_Clusters(t *testing.T) {
	t.Parallel()
	b := newBrowser(t)
	const euUI = "http://nomad-eu.example:4646"
	s := startManaged(t, nopstest.WithConfig(func(c *config.Config) {
		c.Nomads = []config.NomadCluster{
			{Name: "eu", Address: testutil.ClosedAddress(t), UIURL: euUI},
			{Name: "us", Address: testutil.ClosedAddress(t), Requires: []string{"eu"}, Bake: 30 * time.Minute},
		}
	}))
	clusterStatus(t, s, "eu", "web", structs.SyncInSync)
	clusterStatus(t, s, "us", "web", structs.SyncDrift)
	clusterStatus(t, s, "us", "api", structs.SyncInSync)
	euDep := s.CreatePendingWith("default", "web", func(d *structs.Deployment) { d.Cluster, d.FileDiff = "eu", fileDiffIn("eu") })
	usDep := s.CreatePendingWith("default", "web", func(d *structs.Deployment) { d.Cluster, d.FileDiff = "us", fileDiffIn("us") })

	// The jobs list: a cluster column, sorted by cluster, each job linked
	// with its cluster.
	b.open(s.URL + "/ui/jobs")
	if got := rowTexts(b, "#jobs-table thead tr"); !strings.HasPrefix(got, "Cluster|Job|Sync") {
		t.Errorf("the jobs table's head reads %q; want a Cluster column first", got)
	}
	if got := jobLinks(b); got !=
		"eu /ui/job/default/web?cluster=eu,us /ui/job/default/api?cluster=us,us /ui/job/default/web?cluster=us" {
		t.Errorf("the jobs list shows %q; want web in eu, then api and web in us, each linked with its cluster", got)
	}
	if got, _ := eval[string](b, `Array.from(document.querySelectorAll("#f-cluster option")).map(o => o.value).join(",")`); got != ",eu,us" {
		t.Errorf("the cluster filter offers %q; want any, eu, us", got)
	}
	// Search as one types matches the job key the server's search does:
	// "us:" keeps us's jobs (their links read default/… alone).
	b.typeInto("#f-q", "us:")
	if got, _ := eval[string](b, `Array.from(document.querySelectorAll("#jobs-table tbody tr")).filter(r => !r.hidden).map(r => r.dataset.key).join(",")`); got != "us:default/api,us:default/web" {
		t.Errorf("typing us: in the search box shows %q; want us's two jobs", got)
	}
	if _, err := eval[bool](b, `(() => { const q = document.querySelector("#f-q"); q.value = ""; q.dispatchEvent(new Event("input", {bubbles: true})); return true; })()`); err != nil {
		t.Fatal(err)
	}
	// The filter narrows the list, and keeps its choice.
	if _, err := eval[bool](b, `(() => { document.querySelector("#f-cluster").value = "us"; document.querySelector("form.filters button[type=submit]").click(); return true; })()`); err != nil {
		t.Fatal(err)
	}
	b.waitJS("filtered by us", `location.search.includes("cluster=us") && document.readyState === "complete"`, 20*time.Second)
	if got := rowTexts(b, "#jobs-table tbody tr"); strings.Contains(got, "eu|") || strings.Count(got, "\n") != 1 || !strings.Contains(got, "us|default/api") {
		t.Errorf("the jobs list filtered by us shows:\n%s", got)
	}
	if v, _ := eval[string](b, `document.querySelector("#f-cluster").value + " " + document.querySelector("#jobs-table p").textContent`); v != "us 2 of 3 jobs match." {
		t.Errorf("after the filter: %q; want us selected and 2 of 3 jobs", v)
	}

	// The same job ID in two clusters: two pages, each its own.
	for _, c := range []struct{ cluster, sync, nomad string }{{"eu", "in_sync", euUI + "/ui/jobs/web@default"}, {"us", "drift", ""}} {
		b.open(s.URL + "/ui/jobs")
		b.click(`#jobs-table a[href="/ui/job/default/web?cluster=` + c.cluster + `"]`)
		b.waitJS("the job page of web in "+c.cluster, `location.pathname === "/ui/job/default/web" && !!document.querySelector("#job-cluster")`, 20*time.Second)
		got, _ := eval[string](b, `document.querySelector("#job-cluster strong").textContent + "|" + document.querySelector("#job-sync").textContent + "|" +
			(document.querySelector("#nomad-job") ? document.querySelector("#nomad-job").getAttribute("href") : "") + "|" + document.querySelector("h1").textContent`)
		if want := c.cluster + "|" + c.sync + "|" + c.nomad + "|" + c.cluster + ":default/web"; got != want {
			t.Errorf("the page of web in %s shows %q; want %q", c.cluster, got, want)
		}
		if v, _ := eval[string](b, `document.querySelector("#job-cluster .badge") ? document.querySelector("#job-cluster .badge").textContent : ""`); v != "unreachable" {
			t.Errorf("the page of web in %s says its cluster is %q; want unreachable", c.cluster, v)
		}
		if v, _ := eval[string](b, `Array.from(document.querySelectorAll("#job-actions form")).map(f => f.getAttribute("action")).join(",")`); v !=
			"/ui/job/default/web/pause?cluster="+c.cluster+",/ui/job/default/web/deploy-now?cluster="+c.cluster {
			t.Errorf("the actions of web in %s post to %q; want the job's cluster in each", c.cluster, v)
		}
		b.screenshots("clusters-job-" + c.cluster)
	}
	// Pausing web in us pauses it there only, and comes back to its page.
	b.typeInto("#pause-reason", "us maintenance")
	b.click("#pause")
	b.waitJS("paused, back on web in us", `location.search.includes("cluster=us") && location.search.includes("done=pause") && document.querySelector("#job-pause").textContent.includes("paused")`, 20*time.Second)
	if p, err := s.State().Paused("us", "default", "web"); err != nil || p == nil {
		t.Errorf("web in us is not paused: %v %v", p, err)
	}
	if p, err := s.State().Paused("eu", "default", "web"); err != nil || p != nil {
		t.Errorf("pausing web in us paused web in eu: %+v %v", p, err)
	}
	// The audit log links the pause to web in us, not to a deployment.
	b.open(s.URL + "/ui/events?kind=pause")
	if v, _ := eval[string](b, `Array.from(document.querySelectorAll("#events tbody td.nowrap a")).map(a => a.getAttribute("href")).join(",")`); v != "/ui/job/default/web?cluster=us" {
		t.Errorf("the pause's event links %q; want /ui/job/default/web?cluster=us", v)
	}
	// A live update of the audit log keeps the cluster column and each
	// job's cluster on its link.
	markPage(b)
	apply(t, s, structs.PauseRequestType, &structs.PauseRequest{WriteMeta: systemMeta(), Cluster: "eu", Namespace: "default", JobID: "web", Reason: "eu maintenance"})
	b.waitJS("the pause of web in eu, live", liveMarked+` && document.querySelectorAll("#events tbody td.nowrap a").length === 2`, 20*time.Second)
	if v, _ := eval[string](b, `Array.from(document.querySelectorAll("#events tbody tr")).map(r => r.querySelector("td.cluster").textContent + " " +
		r.querySelector("td.nowrap a").getAttribute("href")).join(",")`); v != "eu /ui/job/default/web?cluster=eu,us /ui/job/default/web?cluster=us" {
		t.Errorf("after a live update the pauses' events read %q; want web in eu then in us, each linked with its cluster", v)
	}
	// The cluster filter keeps eu's events (and those of no cluster), and
	// its choice.
	if _, err := eval[bool](b, `(() => { document.querySelector("#e-cluster").value = "eu"; document.querySelector("#events-submit").click(); return true; })()`); err != nil {
		t.Fatal(err)
	}
	b.waitJS("events filtered by eu", `location.search.includes("cluster=eu") && document.readyState === "complete"`, 20*time.Second)
	if v, _ := eval[string](b, `document.querySelector("#e-cluster").value + " " + Array.from(document.querySelectorAll("#events tbody tr")).map(r => r.querySelector("td.cluster").textContent).join(",")`); v != "eu eu" {
		t.Errorf("the events filtered by eu read %q; want eu selected and the one pause of web in eu", v)
	}
	// A cluster Nops does not deploy to is the filter's error, named.
	b.open(s.URL + "/ui/events?kind=pause&cluster=mars")
	if v, _ := eval[string](b, `document.querySelector("#e-cluster").value + "|" + (document.querySelector("#e-cluster-error") || {}).textContent`); !strings.HasPrefix(v, "mars|") || !strings.Contains(v, `no Nomad cluster "mars"`) {
		t.Errorf("the events filtered by an unknown cluster read %q; want mars kept and the error naming it", v)
	}
	b.screenshots("clusters-events-unknown")
	if v, _ := eval[string](b, `document.querySelector("label[for=e-object]").textContent`); !strings.Contains(v, "[cluster:]namespace/job") {
		t.Errorf("the events' object filter is labelled %q; want it to say a job's object names its cluster", v)
	}
	apply(t, s, structs.ResumeRequestType, &structs.ResumeRequest{WriteMeta: systemMeta(), Cluster: "eu", Namespace: "default", JobID: "web", Reason: "done"})
	// The pauses page says which web is paused.
	b.open(s.URL + "/ui/pauses")
	if got := rowTexts(b, "#pauses tbody tr"); !strings.HasPrefix(got, "us|default/web|") {
		t.Errorf("the pauses page shows %q; want web in us", got)
	}
	// Every job of one cluster is paused, and resumed, from the same page:
	// eu's jobs only.
	b.typeInto("#pause-reason-eu", "eu freeze")
	b.click("#pause-cluster-eu")
	b.waitJS("eu paused", `location.search.includes("done=pause") && !!document.querySelector("#resume-cluster-eu")`, 20*time.Second)
	if p, err := s.State().Paused("eu", "default", "api"); err != nil || p == nil || p.JobID != "" || p.Reason != "eu freeze" {
		t.Errorf("after pausing eu, a job of eu is held by %+v (%v); want the pause of every job of eu", p, err)
	}
	if p, err := s.State().Paused("us", "default", "api"); err != nil || p != nil {
		t.Errorf("pausing eu paused api in us: %+v %v", p, err)
	}
	if got := rowTexts(b, "#pauses tbody tr"); !strings.Contains(got, "eu|every job of cluster eu|") {
		t.Errorf("the pauses page shows:\n%s\nwant a row for every job of eu", got)
	}
	if v, _ := eval[string](b, `document.querySelector("#pause-cluster-us").textContent`); v != "Pause every job of us" {
		t.Errorf("us's button reads %q while eu is paused", v)
	}
	b.screenshots("clusters-pauses")
	b.typeInto("#resume-reason-eu", "thaw")
	b.click("#resume-cluster-eu")
	b.waitJS("eu resumed", `location.search.includes("done=resume") && !!document.querySelector("#pause-cluster-eu")`, 20*time.Second)
	if p, err := s.State().Paused("eu", "default", "api"); err != nil || p != nil {
		t.Errorf("after resuming eu, api in eu is held by %+v (%v)", p, err)
	}
	// Another operator's pauses reach the forms live: eu's Pause becomes a
	// Resume without a reload, while the reason typed for us stays; once
	// us is paused too, the Pause being typed in stays, disabled and said
	// to be stale, with its text, beside us's new Resume; every job's
	// form follows a global pause.
	markPage(b)
	b.typeInto("#pause-reason-us", "us half-typed")
	apply(t, s, structs.PauseRequestType, &structs.PauseRequest{WriteMeta: systemMeta(), Cluster: "eu", Reason: "other operator"})
	b.waitJS("eu's resume, live", liveMarked+` && !!document.querySelector("#resume-cluster-eu") && !document.querySelector("#pause-cluster-eu")`, 20*time.Second)
	if v, _ := eval[string](b, `document.querySelector("#resume-cluster-eu").textContent + "|" + document.querySelector("#pause-reason-us").value + "|" + document.querySelector("#pause-cluster-us").disabled`); v != "Resume every job of eu|us half-typed|false" {
		t.Errorf("after eu was paused elsewhere the forms read %q; want eu's Resume and us's typed reason kept", v)
	}
	// A pause just made reads as past, not "in 0s" (the page's clock
	// was whole seconds).
	if v, _ := eval[string](b, `Array.from(document.querySelectorAll("#pauses time[data-rel]")).map(e => e.textContent).filter(s => !s.endsWith(" ago")).join(",")`); v != "" {
		t.Errorf("the pauses' times read %q; want each some time ago", v)
	}
	apply(t, s, structs.PauseRequestType, &structs.PauseRequest{WriteMeta: systemMeta(), Cluster: "us", Reason: "other operator"})
	apply(t, s, structs.PauseRequestType, &structs.PauseRequest{WriteMeta: systemMeta(), Global: true, Reason: "other operator"})
	b.waitJS("us's resume and every job's, live", liveMarked+` && !!document.querySelector("#resume-cluster-us") && !!document.querySelector("#resume-all")`, 20*time.Second)
	if v, _ := eval[string](b, `(() => { const f = document.querySelector("#cluster-pause-us"); return f ? [f.querySelector("#pause-reason-us").value, f.querySelector("button").disabled, !!f.querySelector(".stale-note"), !!document.querySelector("#pause-all")].join("|") : "gone"; })()`); v != "us half-typed|true|true|false" {
		t.Errorf("after us was paused elsewhere its half-typed Pause reads %q; want its text kept, disabled, said to be stale (and no Pause every job)", v)
	}
	b.screenshots("clusters-pauses-live")
	apply(t, s, structs.ResumeRequestType, &structs.ResumeRequest{WriteMeta: systemMeta(), Global: true, Reason: "done"})
	apply(t, s, structs.ResumeRequestType, &structs.ResumeRequest{WriteMeta: systemMeta(), Cluster: "eu", Reason: "done"})
	apply(t, s, structs.ResumeRequestType, &structs.ResumeRequest{WriteMeta: systemMeta(), Cluster: "us", Reason: "done"})

	// The overview: both clusters, unreachable, linked to their jobs; the
	// promotion order of us; the cluster of each waiting deployment.
	b.open(s.URL + "/ui/")
	rows := rowTexts(b, "#ov-clusters tbody tr")
	for _, c := range []string{"eu", "us"} {
		var row string
		for _, r := range strings.Split(rows, "\n") {
			if strings.HasPrefix(r, c+"|") {
				row = r
			}
		}
		if !strings.Contains(row, "|unreachable never contacted|") || !strings.Contains(row, "|never|") {
			t.Errorf("the overview's row of %s reads %q; want it unreachable, never contacted", c, row)
		}
		if href, _ := eval[string](b, `document.querySelector("#cluster-`+c+` a").getAttribute("href")`); href != "/ui/jobs?cluster="+c {
			t.Errorf("the overview links %s to %q; want its jobs", c, href)
		}
	}
	if v, _ := eval[string](b, `document.querySelector("#cluster-us .promotion").textContent + "|" + document.querySelector("#cluster-eu .promotion").textContent`); v != "requires eu, bake 30m|—" {
		t.Errorf("the promotion orders read %q; want us requiring eu with a bake of 30m, and none for eu", v)
	}
	if v, _ := eval[string](b, `document.querySelector("#cluster-us").cells[5].textContent + "/" + document.querySelector("#cluster-us").cells[6].textContent`); v != "2/1" {
		t.Errorf("the overview counts %q jobs/drifted in us; want 2/1", v)
	}
	pending := rowTexts(b, "#ov-pending tbody tr")
	if !strings.Contains(pending, "eu|default/web|"+structs.ShortID(euDep.ID)) || !strings.Contains(pending, "us|default/web|"+structs.ShortID(usDep.ID)) {
		t.Errorf("the overview's approvals read:\n%s\nwant web in eu and in us with their clusters", pending)
	}
	if v, _ := eval[string](b, `document.querySelector("#ov-nomad").dataset.poll || ""`); v == "" {
		t.Errorf("the Nomad clusters' panel is not polled: whether a cluster is reachable changes without a write, and no live update would show it")
	}
	b.click(`#cluster-eu a`)
	b.waitJS("the jobs of eu", `location.search === "?cluster=eu" && document.querySelectorAll("#jobs-table tbody tr").length === 1`, 20*time.Second)

	// The approvals queue and the deployments page: the cluster of each.
	b.open(s.URL + "/ui/approvals")
	if got := rowTexts(b, "#approvals tbody tr:not(.fd-row)"); !strings.HasPrefix(got, "eu|default/web|") || !strings.Contains(got, "\nus|default/web|") {
		t.Errorf("the approvals queue reads:\n%s", got)
	}
	if v, _ := eval[string](b, `Array.from(document.querySelectorAll("#approvals .fd-row summary")).map(s => s.textContent.split(" (")[0]).join(",")`); v !=
		"File diff of eu: default/web,File diff of us: default/web" {
		t.Errorf("the approvals' file diffs are of %q; want each named with its cluster", v)
	}
	b.open(s.URL + "/ui/deployments?cluster=eu")
	if got := rowTexts(b, "#deployments tbody tr"); strings.Contains(got, "\n") ||
		!strings.HasPrefix(got, "eu|default/web|"+structs.ShortID(euDep.ID)+"|pending_approval|"+structs.ShortID(euDep.Commit)) {
		t.Errorf("the deployments filtered by eu read:\n%s", got)
	}
	// A deployment's page names its cluster and links its job in it.
	b.open(s.URL + "/ui/deployment/" + usDep.ID)
	if v, _ := eval[string](b, `document.querySelector("#dep-cluster").textContent + " " + document.querySelector("#dep-job").getAttribute("href") + " " + !!document.querySelector("#nomad-job")`); v != "us /ui/job/default/web?cluster=us false" {
		t.Errorf("the deployment of web in us shows %q", v)
	}
	// Rejecting web in eu asks to confirm which web it is.
	b.open(s.URL + "/ui/deployment/" + euDep.ID)
	b.typeInto("#reject-reason", "wrong region")
	b.click("#reject")
	b.waitJS("the rejection's confirmation", `!!document.querySelector("#confirm-reject")`, 20*time.Second)
	if v, _ := eval[string](b, `(document.querySelector("#confirm-cluster") || {}).textContent + " " + document.querySelector("main dl a").getAttribute("href")`); v != "eu /ui/job/default/web?cluster=eu" {
		t.Errorf("the confirmation of a rejection of web in eu shows %q; want its cluster and its job linked in it", v)
	}
	b.screenshots("clusters-reject-confirm")

	// The promotion order holds web in us: the jobs list and its page say
	// what it waits for, brought by live updates that keep the cluster
	// column, the cluster and the ?cluster= of every link and form.
	const waiting = "waiting for staging (bakes until 14:32)"
	b.open(s.URL + "/ui/jobs")
	markPage(b)
	clusterStatus(t, s, "us", "web", structs.SyncDrift, func(st *structs.JobStatus) { st.WaitingFor = waiting })
	b.waitJS("web in us waiting, live", liveMarked+` && document.querySelector("#jobs-table tbody").textContent.includes("bakes until")`, 20*time.Second)
	if got := rowTexts(b, "#jobs-table thead tr"); !strings.HasPrefix(got, "Cluster|Job|Sync") {
		t.Errorf("after a live update the jobs table's head reads %q; want a Cluster column first", got)
	}
	if got := jobLinks(b); got !=
		"eu /ui/job/default/web?cluster=eu,us /ui/job/default/api?cluster=us,us /ui/job/default/web?cluster=us" {
		t.Errorf("after a live update the jobs list shows %q; want each job linked with its cluster", got)
	}
	if got := rowTexts(b, "#jobs-table tbody tr"); !strings.Contains(got, "us|default/web|drift") || !strings.Contains(got, waiting) {
		t.Errorf("the jobs list does not say what web in us waits for:\n%s", got)
	}
	b.open(s.URL + "/ui/job/default/web?cluster=us")
	if v, _ := eval[string](b, `(document.querySelector("#job-waiting") || {}).textContent`); v != waiting {
		t.Errorf("the page of web in us says it waits for %q; want %q", v, waiting)
	}
	markPage(b)
	clusterStatus(t, s, "us", "web", structs.SyncDrift, func(st *structs.JobStatus) { st.WaitingFor, st.DriftSummary = waiting, "1 group changed" })
	b.waitJS("web in us changed, live", liveMarked+` && document.querySelector("#job-status").textContent.includes("1 group changed")`, 20*time.Second)
	if v, _ := eval[string](b, `document.querySelector("#job-cluster strong").textContent + "|" + document.querySelector("#job-waiting").textContent + "|" +
		Array.from(document.querySelectorAll("#job-actions form")).map(f => f.getAttribute("action")).join(",")`); v !=
		"us|"+waiting+"|/ui/job/default/web/resume?cluster=us,/ui/job/default/web/deploy-now?cluster=us" {
		t.Errorf("after a live update the page of web in us shows %q; want its cluster, what it waits for, and its actions in us", v)
	}
	b.screenshots("clusters-job-waiting")

	// Every page, at a desktop's and a phone's width.
	pages := map[string]string{"overview": "/ui/", "jobs": "/ui/jobs", "job": "/ui/job/default/web?cluster=us",
		"approvals": "/ui/approvals", "deployments": "/ui/deployments", "deployment": "/ui/deployment/" + euDep.ID,
		"pauses": "/ui/pauses", "events": "/ui/events"}
	for _, w := range []int64{1280, 390} {
		b.do(fmt.Sprintf("%d pixels wide", w), chromedp.EmulateViewport(w, 900))
		for _, name := range []string{"overview", "jobs", "job", "approvals", "deployments", "deployment", "pauses", "events"} {
			b.open(s.URL + pages[name])
			shot := fmt.Sprintf("clusters-%s-%d", name, w)
			b.checkLayout(shot)
			if words, _ := eval[string](b, brokenAddresses); words != "" {
				t.Errorf("%s: a cluster's address breaks inside %q", shot, words)
			}
			if name == "overview" {
				// Whether each cluster is reachable shows without
				// scrolling sideways, on a phone too.
				if v, _ := eval[string](b, `["eu", "us"].map(c => { const r = document.querySelector("#cluster-" + c + " .reach .badge").getBoundingClientRect();
					return r.width > 0 && r.right <= document.querySelector("#ov-nomad").getBoundingClientRect().right ? "" : c; }).join("")`); v != "" {
					t.Errorf("%s: the reachability of %s is out of sight (scrolled sideways)", shot, v)
				}
				if v, _ := eval[string](b, hangingValues); v != "" {
					t.Errorf("%s: a value wraps to under its label in %s", shot, v)
				}
			}
			b.screenshot(shot)
		}
	}
	b.do("window size", chromedp.EmulateViewport(1280, 900))

	// One default cluster: no cluster column, filter or ?cluster=, and
	// no clusters' panel: Nomad is one line of the overview's Cluster
	// panel.
	one := startManaged(t, nopstest.WithConfig(func(c *config.Config) { c.NomadAddr = testutil.ClosedAddress(t) }))
	setStatus(t, one, "web", structs.SyncInSync)
	b.open(one.URL + "/ui/jobs")
	if v, _ := eval[string](b, `document.querySelector("#jobs-table thead tr").cells[0].textContent + "|" + !!document.querySelector("#f-cluster") + "|" +
		document.querySelector("#jobs-table tbody a").getAttribute("href")`); v != "Job|false|/ui/job/default/web" {
		t.Errorf("the jobs list of one default cluster: %q; want no cluster column, no filter, no ?cluster=", v)
	}
	b.do("phone", chromedp.EmulateViewport(390, 900))
	b.open(one.URL + "/ui/")
	if words, _ := eval[string](b, brokenAddresses); words != "" {
		t.Errorf("the overview of one default cluster at 390 pixels breaks its address inside %q", words)
	}
	b.do("window size", chromedp.EmulateViewport(1280, 900))
	b.open(one.URL + "/ui/")
	if v, _ := eval[string](b, `(document.querySelector("#ov-nomad-one") || {}).textContent + "|" + !!document.querySelector("#ov-nomad")`); !strings.Contains(v, "unreachable") || !strings.HasSuffix(v, "|false") {
		t.Errorf("the overview of one default cluster: %q; want one line saying it is unreachable, no panel", v)
	}
	if v, _ := eval[string](b, `document.querySelector("#ov-cluster").dataset.poll || ""`); v == "" {
		t.Errorf("the Cluster panel, with its Nomad line, is not polled: whether Nomad is reachable changes without a write")
	}
	b.screenshots("clusters-one-overview")
}

// jobLinks reads the jobs table's rows as "cluster link", comma-separated.
func jobLinks(b *browser) string {
	got, _ := eval[string](b, `Array.from(document.querySelectorAll("#jobs-table tbody tr")).map(r =>
		r.cells[0].textContent + " " + r.cells[1].querySelector("a").getAttribute("href")).join(",")`)
	return got
}
