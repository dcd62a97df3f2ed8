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
	add("GET /ui/static/{file}", public(), u.Static)
	add("GET /ui/login", public(), u.loginPage)
	add("POST /ui/login", public(), u.login)
	add("POST /ui/logout", public(), u.logout)
	add("GET /ui/login/sso", public(), u.ssoStart)
	add("GET /ui/oidc/callback", public(), u.ssoCallback)

	add("GET /ui/{$}", read(), u.overview)
	add("GET /ui/jobs", read(), u.jobs)
	add("GET /ui/job/{ns}/{id}", onJob("read"), u.job)
	add("GET /ui/deployment/{id}", onDeployment("read"), u.deployment)
	add("GET /ui/approvals", read(), u.approvals)
	add("GET /ui/pauses", read(), u.pauses)
	add("GET /ui/windows", onCluster("read"), u.windows)
	add("GET /ui/orphans", read(), u.orphans)
	add("GET /ui/events", read(), u.events)
	add("GET /ui/cluster", onCluster("read"), u.cluster)
	add("GET /ui/live", read(), u.live)

	add("POST /ui/deployment/{id}/approve", onDeployment("approve"), u.approve)
	add("POST /ui/deployment/{id}/reject", onDeployment("approve"), u.reject)
	add("POST /ui/deployment/{id}/promote", onDeployment("deploy"), u.promote)
	add("POST /ui/job/{ns}/{id}/pause", onJob("pause"), u.jobPause)
	add("POST /ui/job/{ns}/{id}/resume", onJob("pause"), u.jobResume)
	add("POST /ui/job/{ns}/{id}/retry", onJob("deploy"), u.jobRetry)
	add("POST /ui/job/{ns}/{id}/deploy-now", onJob("deploy"), u.jobDeployNow)
	add("POST /ui/pause", onCluster("pause"), u.pauseAll)
	add("POST /ui/resume", onCluster("pause"), u.resumeAll)
	add("POST /ui/windows", onCluster("windows"), u.windowCreate)
	add("POST /ui/window/{name}/delete", onCluster("windows"), u.windowDelete)
	add("POST /ui/repo/{name}/refresh", onCluster("deploy"), u.repoRefresh)
}
