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
		"since": func(t time.Time) string { return since(u.cfg.Now(), t) },
		"ts": func(t time.Time) string {
			if t.IsZero() {
				return "—"
			}
			return t.UTC().Format(time.RFC3339)
		},
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
		"queryEscape": url.QueryEscape,
		"dur":         func(d time.Duration) string { return d.String() },
	}
	maps.Copy(m, diffFuncs())
	maps.Copy(m, u.nomadFuncs())
	return m
}

func toString(v any) string { return fmt.Sprint(v) }
