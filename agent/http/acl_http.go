package agenthttp

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/nops-dev/nops/agent/acl"
	"github.com/nops-dev/nops/structs"
)

// scope says what a route's capability applies to.
type scope uint8

const (
	// scopeNone: the route is a mistake: it declared no rule. It is
	// refused to every token but a management token, and the route-table
	// test fails.
	scopeNone scope = iota
	// scopePublic: no token needed (status, health, the HMAC-checked
	// webhook, bootstrap and SSO login).
	scopePublic
	// scopeToken: any valid token (token/self).
	scopeToken
	// scopeCluster: the capability on the cluster (cluster block).
	scopeCluster
	// scopeJob: the capability on the job named by {ns} and {id} in the
	// Nomad cluster ?cluster= names or, without it, the job's one cluster
	// (jobCluster).
	scopeJob
	// scopeDeployment: the capability on the job of the deployment {id}.
	scopeDeployment
	// scopeList: a list whose items are filtered to those of jobs on
	// which the token holds the capability (items of no namespace need it
	// on the cluster).
	scopeList
)

// routeRule is the access rule a route declares beside its kind.
type routeRule struct {
	scope scope
	cap   acl.Capability
}

// public is the rule of a route that needs no token.
func public() routeRule { return routeRule{scope: scopePublic} }

// anyToken is the rule of a route that needs a valid token and no
// capability.
func anyToken() routeRule { return routeRule{scope: scopeToken} }

func onCluster(c acl.Capability) routeRule    { return routeRule{scope: scopeCluster, cap: c} }
func onJob(c acl.Capability) routeRule        { return routeRule{scope: scopeJob, cap: c} }
func onDeployment(c acl.Capability) routeRule { return routeRule{scope: scopeDeployment, cap: c} }
func filtered(c acl.Capability) routeRule     { return routeRule{scope: scopeList, cap: c} }

// RouteInfo is one API route with its forwarding kind and access rule.
type RouteInfo struct {
	Pattern string
	Write   bool
	// Scope is what the capability applies to: public, token, cluster,
	// job, deployment or list; empty for a route that declared no rule.
	Scope string
	// Capability is the capability the route needs, for the scopes that
	// take one.
	Capability string
	// Answer is the type a successful answer's JSON decodes into (one of
	// package structs, or a slice or pointer of one); nil when the route
	// answers something else, which NotJSON describes, or declared nothing
	// (both empty: the route-table test fails).
	Answer reflect.Type
	// NotJSON says what a route that does not answer JSON answers.
	NotJSON string
}

var scopeNames = map[scope]string{
	scopePublic: "public", scopeToken: "token", scopeCluster: "cluster", scopeJob: "job",
	scopeDeployment: "deployment", scopeList: "list",
}

// RouteTable lists every API route the server serves, with its rule and
// its answer.
func RouteTable(s Server) []RouteInfo {
	var out []RouteInfo
	answers := routeAnswers()
	newHTTPAPI(s).routes(func(pattern, kind string, rule routeRule, _ handlerFunc) {
		info := RouteInfo{Pattern: pattern, Write: kind == kindWrite, Scope: scopeNames[rule.scope]}
		if rule.cap != 0 {
			info.Capability = rule.cap.String()
		}
		if kind == kindUI {
			info.NotJSON = "the dashboard: an HTML page, a static file or a redirect"
		} else if a, ok := answers[pattern]; ok {
			info.Answer, info.NotJSON = a.typ, a.notJSON
		}
		out = append(out, info)
	})
	return out
}

// identity is who a request comes from once its token is checked.
type identity struct {
	acl *acl.ACL
	// name is the actor recorded on what the request does.
	name string
	// token is nil for an anonymous request.
	token *structs.ACLToken
}

// headerAuthorization carries a bearer token.
const headerAuthorization = "Authorization"

// requestSecret returns the token secret of a request: X-Nops-Token, else
// an Authorization bearer token.
func requestSecret(r *http.Request) string {
	if t := strings.TrimSpace(r.Header.Get(headerToken)); t != "" {
		return t
	}
	if h := r.Header.Get(headerAuthorization); len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

// headerToken carries the token secret.
const headerToken = "X-Nops-Token"

// aclCache holds the compiled ACLs of recent tokens, dropped whenever any
// ACL object changes.
type aclCache struct {
	mu    sync.Mutex
	index uint64
	acls  map[string]*acl.ACL
}

// maxCachedACLs bounds the cache; past it the cache starts over. A compiled
// ACL is a few KiB, and a cluster has far fewer distinct tokens than this.
const maxCachedACLs = 4096

func (c *aclCache) get(index uint64, key string) (*acl.ACL, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.index != index {
		c.index, c.acls = index, map[string]*acl.ACL{}
		return nil, false
	}
	a, ok := c.acls[key]
	return a, ok
}

func (c *aclCache) put(index uint64, key string, a *acl.ACL) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.index != index || c.acls == nil || len(c.acls) >= maxCachedACLs {
		c.index, c.acls = index, map[string]*acl.ACL{}
	}
	c.acls[key] = a
}

// errTokenNotFound answers a token this server does not know. A follower
// forwards such a request to the leader rather than answer it: the token
// may have been created a moment ago, and not be applied here yet.
var errTokenNotFound = &HTTPError{Code: http.StatusUnauthorized, Msg: "ACL token not found"}

// errUnauthorized is a 401: no token, or one that is unknown or expired.
func errUnauthorized(msg string) error {
	return &HTTPError{Code: http.StatusUnauthorized, Msg: msg}
}

func errForbidden(msg string) error {
	return &HTTPError{Code: http.StatusForbidden, Msg: msg}
}

// resolve checks the request's token against the replicated state.
func (a *apiBase) resolve(r *http.Request) (*identity, error) {
	st := a.s.State()
	secret := requestSecret(r)
	if secret == "" {
		pol, err := a.compile(st.ACL().Index(), "\x00anonymous", []string{structs.ACLAnonymousPolicy}, nil)
		if err != nil {
			return nil, err
		}
		return &identity{acl: pol, name: "anonymous"}, nil
	}
	if len(secret) > structs.MaxSecretLen {
		return nil, errUnauthorized(fmt.Sprintf("ACL token not found: a token secret is at most %d bytes", structs.MaxSecretLen))
	}
	hash := structs.HashSecret(secret)
	tok, err := st.ACL().TokenBySecretHash(hash)
	if err != nil {
		return nil, err
	}
	if tok == nil || subtle.ConstantTimeCompare([]byte(tok.SecretHash), []byte(hash)) != 1 {
		return nil, errTokenNotFound
	}
	if tok.Expired(time.Now()) {
		return nil, errUnauthorized("ACL token expired")
	}
	id := &identity{token: tok, name: tokenActor(tok)}
	if tok.Type == structs.ACLManagementToken {
		id.acl = acl.ManagementACL()
		return id, nil
	}
	id.acl, err = a.compile(st.ACL().Index(), tok.AccessorID, tok.Policies, tok.Roles)
	return id, err
}

// tokenActor is the name recorded as the actor of a token's requests.
func tokenActor(t *structs.ACLToken) string {
	if t.Name != "" {
		return t.Name
	}
	return "token-" + t.AccessorID[:min(8, len(t.AccessorID))]
}

// compile returns the ACL of a set of policies and roles, from the cache
// while no ACL object changed. Policies and roles that no longer exist
// grant nothing.
func (a *apiBase) compile(index uint64, key string, policies, roles []string) (*acl.ACL, error) {
	if c, ok := a.acls.get(index, key); ok {
		return c, nil
	}
	st := a.s.State()
	names := append([]string(nil), policies...)
	for _, rn := range roles {
		role, err := st.ACL().Role(rn)
		if err != nil {
			return nil, err
		}
		if role != nil {
			names = append(names, role.Policies...)
		}
	}
	var parsed []*acl.Policy
	seen := map[string]bool{}
	for _, n := range names {
		if seen[n] {
			continue
		}
		seen[n] = true
		p, err := st.ACL().Policy(n)
		if err != nil {
			return nil, err
		}
		if p == nil {
			continue
		}
		pp, err := acl.Parse(p.Rules)
		if err != nil {
			// Rules are checked before they are stored; a policy that
			// does not parse grants nothing.
			a.logger.Warn("ACL policy does not parse; it grants nothing", "policy", n, "error", err)
			continue
		}
		parsed = append(parsed, pp)
	}
	c := acl.Compile(parsed)
	a.acls.put(index, key, c)
	return c, nil
}

type identityKey struct{}

// requestIdentity returns the identity the ACL check put on a request, or
// nil when ACLs are off or the route is public.
func requestIdentity(r *http.Request) *identity {
	id, _ := r.Context().Value(identityKey{}).(*identity)
	return id
}

// authorize applies a route's rule to a request. It returns the request to
// serve, carrying the caller's identity, with X-Nops-Actor set to the
// identity's name: the reconcilers read the actor there, and no client can
// choose it while ACLs are on.
func (a *apiBase) authorize(r *http.Request, rule routeRule) (*http.Request, error) {
	if !a.s.Config().ACL.Enabled || rule.scope == scopePublic {
		if a.s.Config().ACL.Enabled {
			r.Header.Set(headerActor, "anonymous")
		}
		return r, nil
	}
	id, err := a.resolve(r)
	if err != nil {
		return nil, err
	}
	deny := func(what string) error {
		if id.token == nil {
			return errUnauthorized("ACL token required: an anonymous request may not " + what)
		}
		return errForbidden(fmt.Sprintf("Permission denied: token %q may not %s", id.name, what))
	}
	switch rule.scope {
	case scopeToken:
		if id.token == nil {
			return nil, errUnauthorized("ACL token required")
		}
	case scopeCluster:
		if !id.acl.AllowCluster(rule.cap) {
			return nil, deny(fmt.Sprintf("%s on the cluster", rule.cap))
		}
	case scopeJob:
		ns, job := r.PathValue("ns"), r.PathValue("id")
		cluster, err := a.jobCluster(r)
		if err != nil {
			// Which clusters hold the job (or exist) is told only to a
			// token that may act on it in one of them.
			if a.allowJobSomewhere(id.acl, ns, job, rule.cap) {
				return nil, err
			}
			return nil, deny(fmt.Sprintf("%s on job %s", rule.cap, structs.JobKey(shownCluster(r.URL.Query().Get("cluster")), ns, job)))
		}
		if !id.acl.AllowJob(cluster, ns, job, rule.cap) {
			return nil, deny(fmt.Sprintf("%s on job %s", rule.cap, structs.JobKey(cluster, ns, job)))
		}
		r = setQuery(r, "cluster", cluster)
	case scopeDeployment:
		d, err := a.lookupDeployment(r)
		if err != nil {
			// A missing deployment answers 404 to a token that could
			// act on some deployment, and the refusal to any other.
			if id.acl.AllowAnyJob(rule.cap) {
				break
			}
			return nil, deny(fmt.Sprintf("%s on deployments", rule.cap))
		}
		if !id.acl.AllowJob(d.Cluster, d.Namespace, d.JobID, rule.cap) {
			return nil, deny(fmt.Sprintf("%s on job %s", rule.cap, d.Key()))
		}
	case scopeList:
		if !id.acl.AllowCluster(rule.cap) && !id.acl.AllowAnyJob(rule.cap) {
			return nil, deny(fmt.Sprintf("%s anything", rule.cap))
		}
	case scopeNone:
		if !id.acl.IsManagement() {
			return nil, deny("use this route, which declares no ACL rule")
		}
	default:
		return nil, fmt.Errorf("route declares ACL scope %d, which is unknown", rule.scope)
	}
	r.Header.Set(headerActor, id.name)
	return r.WithContext(context.WithValue(r.Context(), identityKey{}, id)), nil
}

// filterList keeps the items of a list answer that the identity may see
// with capability c: items of a job need c on that job (in its Nomad
// cluster), items of no namespace need c on the cluster. Items are
// recognised by their Cluster, Namespace and JobID fields.
func filterList(out any, id *identity, c acl.Capability) any {
	if id == nil || id.acl.IsManagement() {
		return out
	}
	v := reflect.ValueOf(out)
	if v.Kind() != reflect.Slice {
		return out
	}
	kept := reflect.MakeSlice(v.Type(), 0, v.Len())
	for i := 0; i < v.Len(); i++ {
		item := v.Index(i)
		e := item
		for e.Kind() == reflect.Pointer || e.Kind() == reflect.Interface {
			if e.IsNil() {
				break
			}
			e = e.Elem()
		}
		var cluster, ns, job string
		if e.Kind() == reflect.Struct {
			cluster, ns, job = stringField(e, "Cluster"), stringField(e, "Namespace"), stringField(e, "JobID")
		}
		allowed := id.acl.AllowCluster(c)
		if ns != "" {
			allowed = id.acl.AllowJob(cluster, ns, job, c)
		}
		if allowed {
			kept = reflect.Append(kept, item)
		}
	}
	return kept.Interface()
}

// reauthorize checks a long-lived request (a stream) again against the
// current ACL state, and returns its identity now: a stream ends once its
// token is deleted, expires or loses the capability. With ACLs off it
// returns the identity the request started with.
func (a *apiBase) reauthorize(r *http.Request, rule routeRule) (*identity, bool) {
	if !a.s.Config().ACL.Enabled {
		return requestIdentity(r), true
	}
	r2, err := a.authorize(r, rule)
	if err != nil {
		return nil, false
	}
	return requestIdentity(r2), true
}

// canRead reports whether id may read an item of job ns/job of a Nomad
// cluster (of the Nops cluster when ns is empty), as filterList decides
// for one item of a list.
func canRead(id *identity, cluster, ns, job string) bool {
	if id == nil || id.acl.IsManagement() {
		return true
	}
	if ns != "" {
		return id.acl.AllowJob(cluster, ns, job, acl.Read)
	}
	return id.acl.AllowCluster(acl.Read)
}

// stringField returns a string field of a struct, promoted ones included,
// or "" (also when an embedded pointer on the way is nil).
func stringField(v reflect.Value, name string) string {
	sf, ok := v.Type().FieldByName(name)
	if !ok {
		return ""
	}
	f, err := v.FieldByIndexErr(sf.Index)
	if err != nil || f.Kind() != reflect.String {
		return ""
	}
	return f.String()
}
