package agenthttp

import (
	"net/http"

	"github.com/nops-dev/nops/agent/acl"
)

// AuthorizeJob returns the ACL check of a job-scoped route needing c, as
// the API of s runs it on a request.
func AuthorizeJob(s Server, c acl.Capability) func(*http.Request) error {
	a := newHTTPAPI(s)
	rule := onJob(c)
	return func(r *http.Request) error {
		_, err := a.authorize(r, rule)
		return err
	}
}

// AnswerPatterns lists the route patterns the answer table declares.
func AnswerPatterns() []string {
	var out []string
	for pattern := range routeAnswers() {
		out = append(out, pattern)
	}
	return out
}
