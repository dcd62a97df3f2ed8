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
		"canJob":     func(v *Viewer, cluster, ns, job, c string) bool { return v.job(cluster, ns, job, c) },
		"canCluster": func(v *Viewer, c string) bool { return v.cluster(c) },
		"pathEscape": url.PathEscape,
		"jobKey":     structs.JobKey,
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
		"bake":            shortDuration,
		"addr":            breakableAddress,
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

// breakableAddress writes an address (a URL) that may wrap on a phone
// only between its parts: after "//" and before each "." and ":", never
// inside a host label or a port.
func breakableAddress(a string) template.HTML {
	var b strings.Builder
	for i, r := range a {
		if (r == '.' || r == ':') && i > 0 && !strings.HasPrefix(a[i:], "://") {
			b.WriteString("<wbr>")
		}
		b.WriteString(template.HTMLEscapeString(string(r)))
		if r == '/' && strings.HasSuffix(a[:i+1], "//") {
			b.WriteString("<wbr>")
		}
	}
	return template.HTML(b.String())
}

// shortDuration writes a duration as an operator writes it in the
// configuration: 30m, 1h, 1h30m (not 30m0s).
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// exactFormat writes an exact time in UTC.
const exactFormat = "2006-01-02 15:04:05 MST"
