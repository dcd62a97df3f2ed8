package web

import "net/http"

// Rule is the access rule of a dashboard route, in the terms of the API's
// route rules: Scope is public, list, cluster, job ({ns} and {id}) or
// deployment ({id}); Capability is an ACL capability.
type Rule struct {
	Scope      string
	Capability string
}

// Route scopes.
const (
	ScopePublic     = "public"
	ScopeList       = "list"
	ScopeCluster    = "cluster"
	ScopeJob        = "job"
	ScopeDeployment = "deployment"
)

func public() Rule               { return Rule{Scope: ScopePublic} }
func read() Rule                 { return Rule{Scope: ScopeList, Capability: "read"} }
func onCluster(c string) Rule    { return Rule{Scope: ScopeCluster, Capability: c} }
func onJob(c string) Rule        { return Rule{Scope: ScopeJob, Capability: c} }
func onDeployment(c string) Rule { return Rule{Scope: ScopeDeployment, Capability: c} }

// Routes declares every dashboard route with its rule. The server checks
// the rule (with the session's token) before the handler runs; pages need
// read, actions the capability of the matching API action, which the API
// checks again on the leader.
func (u *UI) Routes(add func(pattern string, rule Rule, h http.HandlerFunc)) {
	v, a, s := views{u}, actions{u}, sessions{u}
	add("GET /ui/static/{file}", public(), u.Static)
	add("GET /ui/login", public(), s.loginPage)
	add("POST /ui/login", public(), s.login)
	add("POST /ui/logout", public(), s.logout)
	add("GET /ui/login/sso", public(), s.ssoStart)
	add("GET /ui/oidc/callback", public(), s.ssoCallback)

	add("GET /ui/{$}", read(), v.overview)
	add("GET /ui/jobs", read(), v.jobs)
	add("GET /ui/job/{ns}/{id}", onJob("read"), v.job)
	add("GET /ui/deployments", read(), v.deploymentsPage)
	add("GET /ui/deployment/{id}", onDeployment("read"), v.deployment)
	add("GET /ui/approvals", read(), v.approvals)
	add("GET /ui/pauses", read(), v.pauses)
	add("GET /ui/windows", onCluster("read"), v.windows)
	add("GET /ui/orphans", read(), v.orphans)
	add("GET /ui/preview", read(), v.preview)
	// A read, but one that costs the leader a plan of every job: a form
	// with the CSRF token.
	add("POST /ui/preview", read(), v.previewRun)
	add("GET /ui/events", read(), v.events)
	add("GET /ui/cluster", onCluster("read"), v.cluster)
	add("GET /ui/live", read(), u.live)
	// Any other address under /ui/: the layout, a message, a link home.
	add("GET /ui/{path...}", public(), v.missing)

	add("POST /ui/deployment/{id}/approve", onDeployment("approve"), a.approve)
	add("POST /ui/deployment/{id}/reject", onDeployment("approve"), a.reject)
	add("POST /ui/deployment/{id}/promote", onDeployment("deploy"), a.promote)
	add("POST /ui/job/{ns}/{id}/pause", onJob("pause"), a.jobPause)
	add("POST /ui/job/{ns}/{id}/resume", onJob("pause"), a.jobResume)
	add("POST /ui/job/{ns}/{id}/retry", onJob("deploy"), a.jobRetry)
	add("POST /ui/job/{ns}/{id}/deploy-now", onJob("deploy"), a.jobDeployNow)
	add("POST /ui/pause", onCluster("pause"), a.pauseAll)
	add("POST /ui/resume", onCluster("pause"), a.resumeAll)
	add("POST /ui/windows", onCluster("windows"), a.windowCreate)
	add("POST /ui/window/{name}/delete", onCluster("windows"), a.windowDelete)
	add("POST /ui/repo/{name}/refresh", onCluster("deploy"), a.repoRefresh)
}
