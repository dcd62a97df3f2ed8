package web

import (
	"html/template"
	"net/url"
)

// Links to the Nomad UI (Config.NomadUIURL), by its routes: a job is
// /ui/jobs/<id>@<namespace>, with its task groups, versions, deployments
// and allocations under it; an evaluation opens in /ui/evaluations. Each
// function returns "" when the setting is empty, and the templates then
// show no link.

// nomadFuncs are the template functions of the links to the Nomad UI.
func (u *UI) nomadFuncs() template.FuncMap {
	return template.FuncMap{
		"nomadJobPage": func(ns, job, page string) string {
			if l := u.nomadJob(ns, job); l != "" {
				return l + "/" + page
			}
			return ""
		},
		"nomadGroup": func(ns, job, group string) string {
			if l := u.nomadJob(ns, job); l != "" && group != "" {
				return l + "/" + url.PathEscape(group)
			}
			return ""
		},
		"nomadEval": u.nomadEval,
	}
}

// nomadEval links an evaluation to the Nomad UI, or "".
func (u *UI) nomadEval(ns, id string) string {
	if u.cfg.NomadUIURL == "" || id == "" {
		return ""
	}
	return u.cfg.NomadUIURL + "/ui/evaluations?" + url.Values{"currentEval": {id}, "namespace": {ns}}.Encode()
}
