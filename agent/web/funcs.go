package web

import (
	"fmt"
	"html/template"
	"maps"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nops-dev/nops/structs"
)

func (u *UI) funcs() template.FuncMap {
	m := template.FuncMap{
		// since is a relative time the page's script keeps counting,
		// with the exact time on hover (in the viewer's zone once the
		// script ran; in UTC without it).
		"since": func(t time.Time) template.HTML {
			if t.IsZero() {
				return "never"
			}
			iso := t.UTC().Format(time.RFC3339)
			return template.HTML(`<time datetime="` + iso + `" data-rel title="` + t.UTC().Format(exactFormat) + `">` +
				template.HTMLEscapeString(since(u.cfg.Now(), t)) + `</time>`)
		},
		"ts": func(t time.Time) string {
			if t.IsZero() {
				return "—"
			}
			return t.UTC().Format(time.RFC3339)
		},
		"iso":           func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
		"asset":         u.asset,
		"deployNowHint": deployNowHint,
		"deployNowCase": deployNowCase,

		"short":      structs.ShortID,
		"stateClass": func(v any) string { return stateClass(fmt.Sprint(v)) },
		"str":        func(v any) string { return toString(v) },
		"join":       strings.Join,
		"split":      strings.Fields,
		"dict": func(kv ...any) map[string]any {
			m := map[string]any{}
			for i := 0; i+1 < len(kv); i += 2 {
				k, _ := kv[i].(string)
				m[k] = kv[i+1]
			}
			return m
		},
		"canJob":     func(v *Viewer, ns, job, c string) bool { return v.job(ns, job, c) },
		"canCluster": func(v *Viewer, c string) bool { return v.cluster(c) },
		"nomadJob":   u.nomadJob,
		"nomadDeployment": func(ns, job string) string {
			if l := u.nomadJob(ns, job); l != "" {
				return l + "/deployments"
			}
			return ""
		},
		"pathEscape": url.PathEscape,
		"add":        func(a, b int) int { return a + b },
		"sub":        func(a, b int) int { return a - b },
		"pageQuery": func(q url.Values, page int) template.URL {
			c := url.Values{}
			for k, v := range q {
				c[k] = v
			}
			c.Set("page", strconv.Itoa(page))
			return template.URL(c.Encode())
		},
		"queryEscape":     url.QueryEscape,
		"dur":             func(d time.Duration) string { return d.String() },
		"approvalRefusal": u.approvalRefusal,
		"commitBody":      structs.CommitBody,
		// fileDiffLines splits a file diff into lines with their kind,
		// for the classes that colour them.
		"fileDiffLines": structs.ParseFileDiff,
		"fileDiffCounts": func(diff string) string {
			a, r := structs.FileDiffCounts(diff)
			return fmt.Sprintf("+%d −%d", a, r)
		},
	}
	maps.Copy(m, diffFuncs())
	maps.Copy(m, u.nomadFuncs())
	return m
}

// approvalRefusal says why the viewer's approval of d would be refused
// (they already approved it, or wrote its commit under forbid_self), in
// the FSM's words (structs.Deployment.ApprovalRefusal), or "".
func (u *UI) approvalRefusal(d *structs.Deployment, v *Viewer) string {
	forbidSelf := u.cfg.ForbidSelf != nil && u.cfg.ForbidSelf()
	err := d.ApprovalRefusal(v.Name, forbidSelf)
	if err == nil {
		return ""
	}
	msg := err.Error()
	for _, sentinel := range []error{structs.ErrConflict, structs.ErrForbidden} {
		msg = strings.TrimPrefix(msg, sentinel.Error()+": ")
	}
	return msg
}

func toString(v any) string { return fmt.Sprint(v) }

// exactFormat writes an exact time in UTC.
const exactFormat = "2006-01-02 15:04:05 MST"
