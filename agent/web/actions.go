package web

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/structs/holds"
)

// act runs one API write as the viewer after the CSRF check, then sends
// the browser to back (Post/Redirect/Get) with a done= code. A refusal
// (a conflict, a bad request, a leader that cannot be reached) is shown on
// that same page, so that the reader sees why next to what changed; only
// a session that ended is answered with the login form.
func (u actions) act(w http.ResponseWriter, r *http.Request, method, path string, body any, back, done string) {
	if err := u.checkCSRF(r); err != nil {
		u.fail(w, r, err)
		return
	}
	resp, err := u.cfg.Backend.Do(r.Context(), viewerOf(r), method, path, body)
	if err != nil {
		u.fail(w, r, err)
		return
	}
	if !resp.OK() {
		if resp.Code == http.StatusUnauthorized {
			u.fail(w, r, resp.Err())
			return
		}
		u.refuse(w, r, back, "Refused: "+strings.TrimPrefix(resp.Err().Error(), "conflict: "))
		return
	}
	u.catchUp(r, resp)
	SetHeaders(w.Header())
	sep := "?"
	if strings.Contains(back, "?") {
		sep = "&"
	}
	http.Redirect(w, r, back+sep+"done="+done, http.StatusSeeOther)
}

// refuse sends the browser back to a page that shows why its action was
// refused.
func (u *UI) refuse(w http.ResponseWriter, r *http.Request, back, msg string) {
	u.setFlash(w, msg)
	SetHeaders(w.Header())
	http.Redirect(w, r, back, http.StatusSeeOther)
}

// catchUpWait bounds the wait for this server to apply a write.
const catchUpWait = 3 * time.Second

// catchUp waits, briefly, until this server has applied the index the
// leader answered a write with, so that the page shown next (from this
// server's replicated state) shows the write.
func (u *UI) catchUp(r *http.Request, resp *Response) {
	idx, err := strconv.ParseUint(resp.Header.Get("X-Nops-Index"), 10, 64)
	if err != nil || idx == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), catchUpWait)
	defer cancel()
	for u.cfg.Backend.Index() < idx && ctx.Err() == nil {
		u.cfg.Backend.WaitChange(ctx, u.cfg.Backend.Index())
	}
}

func (u actions) comment(w http.ResponseWriter, r *http.Request, name string) (string, bool) {
	if err := r.ParseForm(); err != nil {
		u.Fail(w, r, http.StatusBadRequest, "bad form: "+err.Error())
		return "", false
	}
	c := strings.TrimSpace(r.PostFormValue(name))
	if err := structs.CheckText(name, c); err != nil {
		u.Fail(w, r, http.StatusBadRequest, err.Error())
		return "", false
	}
	return c, true
}

func deploymentPath(r *http.Request) (api, page string) {
	id := url.PathEscape(r.PathValue("id"))
	return "/v1/deployment/" + id, "/ui/deployment/" + id
}

// jobPath returns the API path of a job action and the job's page, both
// in the job's cluster: the form's ?cluster= (SPEC section 16), without
// which the API resolves the only cluster that holds the job.
func jobPath(r *http.Request, action string) (api, page string) {
	p, q := url.PathEscape(r.PathValue("ns"))+"/"+url.PathEscape(r.PathValue("id")), jobQuery(r)
	api = "/v1/job/" + p
	if action != "" {
		api += "/" + action
	}
	return api + q, "/ui/job/" + p + q
}

// jobQuery is the ?cluster= of a request to a job's page or action, or "".
func jobQuery(r *http.Request) string {
	if c := r.URL.Query().Get("cluster"); c != "" {
		return "?" + url.Values{"cluster": {c}}.Encode()
	}
	return ""
}

// actCommented is act for a write that carries the person's text: the
// form field name, checked as comment checks it, is sent under the same
// name.
func (u actions) actCommented(w http.ResponseWriter, r *http.Request, name, path, back, done string) {
	c, ok := u.comment(w, r, name)
	if !ok {
		return
	}
	u.act(w, r, http.MethodPost, path, map[string]string{name: c}, back, done)
}

func (u actions) approve(w http.ResponseWriter, r *http.Request) {
	api, page := deploymentPath(r)
	u.actCommented(w, r, "comment", api+"/approve", page, "approve")
}

// reject asks first: a post without confirm=yes (the deployment page's
// form) answers a page that shows the deployment and the reason, and asks
// to confirm; a reason is required.
func (u actions) reject(w http.ResponseWriter, r *http.Request) {
	api, page := deploymentPath(r)
	c, ok := u.comment(w, r, "reason")
	if !ok {
		return
	}
	if c == "" || r.PostFormValue("confirm") != "yes" {
		if err := u.checkCSRF(r); err != nil {
			u.fail(w, r, err)
			return
		}
		views(u).confirmReject(w, r, c)
		return
	}
	u.act(w, r, http.MethodPost, api+"/reject", map[string]string{"reason": c}, page, "reject")
}

func (u actions) promote(w http.ResponseWriter, r *http.Request) {
	api, page := deploymentPath(r)
	u.act(w, r, http.MethodPost, api+"/promote", nil, page, "promote")
}

func (u actions) jobPause(w http.ResponseWriter, r *http.Request) {
	api, page := jobPath(r, "pause")
	u.actCommented(w, r, "reason", api, page, "pause")
}

func (u actions) jobResume(w http.ResponseWriter, r *http.Request) {
	api, page := jobPath(r, "resume")
	u.actCommented(w, r, "reason", api, page, "resume")
}

func (u actions) jobRetry(w http.ResponseWriter, r *http.Request) {
	api, page := jobPath(r, "retry")
	u.act(w, r, http.MethodPost, api, nil, page, "retry")
}

// jobDeployNow requests a deployment now; the message after it says what
// that does for the job as it stood: lift its closed window, nothing
// while it is paused, or a check at once.
func (u actions) jobDeployNow(w http.ResponseWriter, r *http.Request) {
	api, page := jobPath(r, "deploy-now")
	detail, _ := jobPath(r, "")
	done := "deploy-now"
	var d structs.JobDetail
	if err := u.get(r, detail, &d); err == nil {
		switch deployNowCase(&d) {
		case "paused":
			done = "deploy-now-paused"
		case "window":
			done = "deploy-now-window"
		}
	}
	u.act(w, r, http.MethodPost, api, nil, page, done)
}

func (u actions) pauseAll(w http.ResponseWriter, r *http.Request) {
	u.wide(w, r, "/v1/pause", "pause")
}

func (u actions) resumeAll(w http.ResponseWriter, r *http.Request) {
	u.wide(w, r, "/v1/resume", "resume")
}

// wide pauses or resumes every job, or every job of the Nomad cluster the
// form names (its cluster field, SPEC section 16), with the form's reason.
func (u actions) wide(w http.ResponseWriter, r *http.Request, path, done string) {
	reason, ok := u.comment(w, r, "reason")
	if !ok {
		return
	}
	body := map[string]string{"reason": reason}
	if c := r.PostFormValue("cluster"); c != "" {
		body["cluster"] = c
	}
	u.act(w, r, http.MethodPost, path, body, "/ui/pauses", done)
}

func (u actions) repoRefresh(w http.ResponseWriter, r *http.Request) {
	u.act(w, r, http.MethodPost, "/v1/repo/"+url.PathEscape(r.PathValue("name"))+"/refresh", nil, "/ui/", "refresh")
}

func (u actions) windowDelete(w http.ResponseWriter, r *http.Request) {
	u.act(w, r, http.MethodDelete, "/v1/window/"+url.PathEscape(r.PathValue("name")), nil, "/ui/windows", "window-delete")
}

// windowCreate validates the form as the API does and shows each problem
// next to its field; a valid window is written through the API (which
// validates again on the leader).
func (u actions) windowCreate(w http.ResponseWriter, r *http.Request) {
	if err := u.checkCSRF(r); err != nil {
		u.fail(w, r, err)
		return
	}
	// Each field is cut to a length past any sensible value, so that a
	// huge post is not echoed back into the page; Validate then refuses
	// what is still wrong.
	f := &windowForm{
		Name: field(r, "name", 256), Kind: field(r, "kind", 16), Schedule: field(r, "schedule", 256),
		Duration: field(r, "duration", 64), Timezone: field(r, "timezone", 128),
		Namespaces: field(r, "namespaces", 2048), Jobs: field(r, "jobs", 2048), Errors: map[string]string{},
	}
	tz := f.Timezone
	if tz == "" {
		tz = "UTC"
	}
	win := &structs.SyncWindow{Name: f.Name, Kind: structs.WindowKind(f.Kind), Schedule: f.Schedule, Duration: f.Duration,
		Timezone: tz, Namespaces: structs.SplitList(f.Namespaces), Jobs: structs.SplitList(f.Jobs)}
	problems := holds.Validate(win)
	if len(problems) == 0 {
		resp, err := u.cfg.Backend.Do(r.Context(), viewerOf(r), http.MethodPut, "/v1/window/"+url.PathEscape(f.Name), map[string]any{
			"kind": f.Kind, "schedule": f.Schedule, "duration": f.Duration, "timezone": tz,
			"namespaces": win.Namespaces, "jobs": win.Jobs,
		})
		if err != nil {
			u.fail(w, r, err)
			return
		}
		if resp.OK() {
			u.catchUp(r, resp)
			SetHeaders(w.Header())
			http.Redirect(w, r, "/ui/windows?done=window", http.StatusSeeOther)
			return
		}
		if resp.Code != http.StatusBadRequest {
			u.fail(w, r, resp.Err())
			return
		}
		problems = resp.Err().Problems
	}
	for _, p := range problems {
		name, msg, ok := strings.Cut(p, ": ")
		switch name {
		case "name", "kind", "schedule", "duration", "timezone", "namespaces", "jobs":
			if ok {
				if prev := f.Errors[name]; prev != "" {
					msg = prev + "; " + msg
				}
				f.Errors[name] = msg
				continue
			}
		}
		f.Other = append(f.Other, p)
	}
	views(u).renderWindows(w, r, http.StatusBadRequest, f)
}
