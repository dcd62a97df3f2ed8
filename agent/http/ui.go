package agenthttp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/nops-dev/nops/agent/acl"
	"github.com/nops-dev/nops/agent/web"
	"github.com/nops-dev/nops/structs"
)

// kindUI is the kind of a dashboard route: served on the HTTP port only,
// never forwarded (its writes are API requests that are), checked against
// its rule with the session's token.
const kindUI = "ui"

// uiActor is the actor of the dashboard's requests without ACLs.
const uiActor = "dashboard"

// dashboard returns the server's dashboard, built once.
func (a *httpAPI) dashboard() *web.UI {
	a.uiOnce.Do(func() {
		cfg := a.s.Config()
		u, err := web.New(web.Config{
			Logger: a.logger.Named("ui"), Backend: &uiBackend{a: a}, ACLs: cfg.ACL.Enabled, TLS: cfg.TLS.HTTP,
			UIURL: cfg.UIURL, NomadUIURL: cfg.NomadUIURL, Node: a.s.NodeName(),
			Clusters: func() []web.ClusterLink {
				var out []web.ClusterLink
				for _, c := range a.s.LiveConfig().Clusters() {
					out = append(out, web.ClusterLink{Name: c.Name, UIURL: c.UIURL})
				}
				return out
			},
			ForbidSelf: func() bool { return a.s.LiveConfig().Approval.ForbidSelf },
		})
		if err != nil {
			// The templates are embedded: this is a build error, which
			// the package's tests catch.
			panic(err)
		}
		a.ui = u
	})
	return a.ui
}

// uiRoutes declares the dashboard's routes, each with its rule.
func (a *httpAPI) uiRoutes(route func(pattern, kind string, rule routeRule, fn handlerFunc)) {
	a.dashboard().Routes(func(pattern string, rule web.Rule, h http.HandlerFunc) {
		route(pattern, kindUI, uiRule(rule), func(w http.ResponseWriter, r *http.Request) (any, error) {
			h(w, r)
			return nil, nil
		})
	})
}

func uiRule(r web.Rule) routeRule {
	c := capabilityByName(r.Capability)
	switch r.Scope {
	case web.ScopePublic:
		return public()
	case web.ScopeList:
		return filtered(c)
	case web.ScopeCluster:
		return onCluster(c)
	case web.ScopeJob:
		return onJob(c)
	case web.ScopeDeployment:
		return onDeployment(c)
	}
	return routeRule{}
}

func capabilityByName(name string) acl.Capability {
	for _, c := range []acl.Capability{acl.Read, acl.Approve, acl.Deploy, acl.Pause, acl.Windows, acl.Operator, acl.ACLWrite} {
		if c.String() == name {
			return c
		}
	}
	return 0
}

// wrapUI serves a dashboard route: the session cookie's token stands for
// the request's token, the route's rule is checked with it (a refusal is
// an error page, or the login page for a missing login), and the viewer
// goes to the page in the request's context.
func (a *httpAPI) wrapUI(rule routeRule, fn handlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if p := recover(); p != nil {
				if isAbort(p) {
					panic(p)
				}
				a.logger.Error("panic in dashboard handler", "path", r.URL.Path, "panic", p)
				http.Error(w, "internal error", http.StatusInternalServerError)
			}
		}()
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		ui := a.dashboard()
		// The token comes from a header (a script or a test; no other
		// site can send one without a CORS preflight, which is never
		// granted, so such a request needs no CSRF token), else from the
		// session cookie.
		r.Header.Del(headerActor)
		secret, header := requestSecret(r), true
		if secret == "" {
			secret, header = web.SessionToken(r), false
		}
		r.Header.Del(headerAuthorization)
		r.Header.Del(headerToken)
		if secret != "" {
			r.Header.Set(headerToken, secret)
		}
		v := &web.Viewer{Name: uiActor, Token: secret, Anonymous: secret == "", HeaderAuth: header && secret != ""}
		if a.s.Config().ACL.Enabled && rule.scope != scopePublic {
			authorized, err := a.authorize(r, rule)
			if err != nil {
				code := StatusOf(err)
				if he, ok := err.(*HTTPError); ok {
					code = he.Code
				}
				ui.Fail(w, r, code, err.Error())
				return
			}
			r = authorized
		}
		if id := requestIdentity(r); id != nil {
			v.Name, v.Anonymous = id.name, id.token == nil
			pol := id.acl
			v.CanCluster = func(c string) bool { return pol.AllowCluster(capabilityByName(c)) }
			v.CanJob = func(cluster, ns, job, c string) bool { return pol.AllowJob(cluster, ns, job, capabilityByName(c)) }
		} else if a.s.Config().ACL.Enabled && secret != "" {
			// A public page of a logged-in user: show the name.
			if id, err := a.resolve(r); err == nil {
				v.Name, v.Anonymous = id.name, id.token == nil
				pol := id.acl
				v.CanCluster = func(c string) bool { return pol.AllowCluster(capabilityByName(c)) }
				v.CanJob = func(cluster, ns, job, c string) bool { return pol.AllowJob(cluster, ns, job, capabilityByName(c)) }
			}
		}
		if a.s.Config().ACL.Enabled && v.CanCluster == nil {
			v.CanCluster = func(string) bool { return false }
			v.CanJob = func(string, string, string, string) bool { return false }
		}
		r = r.WithContext(web.WithViewer(r.Context(), v))
		web.SetHeaders(w.Header())
		_, _ = fn(w, r)
	})
}

// uiBackend gives the dashboard the server's API, in-process.
type uiBackend struct {
	a *httpAPI
}

var _ web.Backend = (*uiBackend)(nil)

// Do serves an API request through the server's own HTTP handler, as if
// it came from a client with the viewer's token: the ACL check, the list
// filters and the forwarding of writes to the leader all apply.
func (b *uiBackend) Do(ctx context.Context, v *web.Viewer, method, path string, body any) (*web.Response, error) {
	var buf bytes.Buffer
	if body != nil {
		if err := json.NewEncoder(&buf).Encode(body); err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://dashboard"+path, &buf)
	if err != nil {
		return nil, fmt.Errorf("build request: %w", err)
	}
	req.RemoteAddr = "dashboard"
	// Every in-process request says JSON, bodiless writes (DELETE) too: the
	// request guard refuses a state change of any other type.
	req.Header.Set("Content-Type", "application/json")
	if v != nil && v.Token != "" {
		req.Header.Set(headerToken, v.Token)
	}
	if !b.a.s.Config().ACL.Enabled {
		req.Header.Set(headerActor, uiActor)
	}
	rec := &recorder{header: http.Header{}}
	b.a.s.HTTPHandler().ServeHTTP(rec, req)
	if rec.code == 0 {
		rec.code = http.StatusOK
	}
	return &web.Response{Code: rec.code, Header: rec.header, Body: rec.body.Bytes(), Value: rec.value}, nil
}

// valueWriter is an answer that takes a handler's value as it is.
type valueWriter interface {
	setValue(v any)
}

var _ valueWriter = (*recorder)(nil)

// WaitChange blocks on the state store's watch.
func (b *uiBackend) WaitChange(ctx context.Context, after uint64) uint64 {
	for {
		st := b.a.s.State()
		ch := st.Changed()
		if idx := st.LatestIndex(); idx > after {
			return idx
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return st.LatestIndex()
		case <-b.a.s.ShutdownCh():
			return st.LatestIndex()
		}
	}
}

func (b *uiBackend) Index() uint64 { return b.a.s.State().LatestIndex() }

// LoginMethods lists the OIDC auth methods, from the replicated state.
func (b *uiBackend) LoginMethods() []web.LoginMethod {
	list, err := b.a.s.State().ACL().AuthMethods()
	if err != nil {
		return nil
	}
	var out []web.LoginMethod
	for _, m := range list {
		if m.Type != structs.ACLAuthMethodOIDC {
			continue
		}
		out = append(out, web.LoginMethod{Name: m.Name, DisplayName: m.DisplayName, Default: m.Default})
	}
	return out
}

// Cluster reads the Raft configuration and the serf members.
func (b *uiBackend) Cluster() (*web.ClusterInfo, error) {
	s := b.a.s
	f := s.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("raft configuration: %w", err)
	}
	leader, leaderID := s.Leader()
	stats := s.Raft().Stats()
	lastIdx, _ := strconv.ParseUint(stats["last_log_index"], 10, 64)
	applied, _ := strconv.ParseUint(stats["applied_index"], 10, 64)
	c := &web.ClusterInfo{Node: s.NodeName(), Version: s.Version(), RaftState: s.Raft().State().String(), Leader: leader,
		LastIndex: lastIdx, AppliedIdx: applied}
	if !s.IsLeader() {
		if last := s.Raft().LastContact(); !last.IsZero() {
			c.LastContact = time.Since(last).Round(time.Millisecond)
		}
	}
	refused := s.Refusals()
	for _, m := range s.Members() {
		role := m.Tags[structs.MemberTagRole]
		c.Members = append(c.Members, web.Member{Name: m.Name, Addr: fmt.Sprintf("%s:%d", m.Addr, m.Port),
			Status: m.Status.String(), Version: m.Tags[structs.MemberTagVersion], Role: role, Refused: refused[m.Name],
			ID: m.Tags[structs.MemberTagID], HTTPAddr: m.Tags[structs.MemberTagHTTPAddr]})
	}
	sort.Slice(c.Members, func(i, j int) bool { return c.Members[i].Name < c.Members[j].Name })
	for _, srv := range f.Configuration().Servers {
		node := s.PeerName(srv.ID, srv.Address)
		c.Peers = append(c.Peers, web.Peer{Node: node, ID: string(srv.ID), Address: string(srv.Address),
			Leader: string(srv.ID) == leaderID, Voter: srv.Suffrage == raft.Voter, RaftProtocol: strconv.Itoa(raft.ProtocolVersionMax)})
	}
	return c, nil
}

// recorder keeps an in-process answer.
type recorder struct {
	mu     sync.Mutex
	header http.Header
	code   int
	body   bytes.Buffer
	value  any
}

func (r *recorder) setValue(v any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.code == 0 {
		r.code = http.StatusOK
	}
	r.value = v
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.code == 0 {
		r.code = code
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.code == 0 {
		r.code = http.StatusOK
	}
	// An answer the dashboard reads is small; bound it all the same.
	if r.body.Len()+len(p) > maxUIAnswer {
		return 0, errAnswerTooLarge
	}
	return r.body.Write(p)
}

// maxUIAnswer bounds an in-process answer the dashboard renders: far over
// any page's data, it only stops a runaway answer from taking the memory.
const maxUIAnswer = 256 << 20

var errAnswerTooLarge = fmt.Errorf("in-process API answer larger than %d bytes", maxUIAnswer)
