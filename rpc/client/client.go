// Package client is the typed Go client of the Nops HTTP API (v1). The CLI
// uses it for every command but `nops serve`; other programs may too.
//
// The client speaks only HTTP and JSON and depends on no server package but
// the leaf package structs, which declares every request body and answer of
// the API once, for the server and this client alike: a program talking to
// Nops does not link the server, and the two sides cannot drift apart. A
// test decodes every answer of a real server strictly into the type its
// route declares.
//
// The methods are grouped by part of the API, each part a small type of its
// own that a method of Client returns: c.Jobs().List, c.Deployments().Approve,
// c.ACL().Tokens, c.Operator().RaftConfiguration, c.Status().Leader,
// c.Agent().Self. Getting a part sends nothing.
//
// Guarantees:
//
//   - Every request carries the token (X-Nops-Token, when one is set) and
//     the actor (X-Nops-Actor, <user>@<hostname> by default) that a server
//     without ACLs records on decisions; with ACLs on, the server records
//     the token's name instead. A request with a body says it is JSON.
//   - An answer other than 2xx is returned as an *APIError with the status
//     code, the server's message and every problem it listed; a server that
//     cannot be reached is an error that names the address.
//   - Read methods return the QueryMeta of the answer: the Raft index of the
//     state read, whether the server knows a leader, how long since it
//     heard from it, and the page token of the next page.
//   - Read-your-writes: the client remembers the highest index its writes
//     were answered with (X-Nops-Index) and sends it with every later read
//     (X-Nops-Min-Index), so that a read never shows a state older than
//     the client's own writes, whichever server answers it; the server
//     waits up to 5 s to apply that index, then answers 503.
//   - The client keeps no state between requests but its configuration, its
//     connection pool and that index; it is safe for concurrent use.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultAddress is the address of the HTTP API when none is configured.
const DefaultAddress = "http://127.0.0.1:4650"

// Headers of the Nops HTTP API.
const (
	HeaderToken       = "X-Nops-Token"
	HeaderActor       = "X-Nops-Actor"
	HeaderIndex       = "X-Nops-Index"
	HeaderKnownLeader = "X-Nops-Known-Leader"
	HeaderLastContact = "X-Nops-Last-Contact"
	HeaderNextToken   = "X-Nops-Next-Token"
	// HeaderMinIndex asks the server for a state of at least this index.
	HeaderMinIndex = "X-Nops-Min-Index"
	// HeaderWarning carries a server's warning about a successful answer.
	HeaderWarning = "X-Nops-Warning"
)

// maxErrorBody bounds how much of an error answer is read.
const maxErrorBody = 1 << 20

// Config configures a Client.
type Config struct {
	// Address is the base URL of a Nops server's HTTP API, for example
	// http://127.0.0.1:4650. Empty means DefaultAddress; an address given
	// without a scheme gets http://.
	Address string

	// Token is sent in X-Nops-Token with every request when set.
	Token string

	// Actor is sent in X-Nops-Actor. Empty means DefaultActor().
	Actor string

	// HTTPClient, when set, sends the requests (for TLS or a custom
	// transport). It should have no overall timeout: event long polls and
	// snapshots take as long as they take, and contexts bound them instead.
	HTTPClient *http.Client

	// TLS, when set, configures the TLS of an https:// address: the CA
	// that signed the server's certificate and the client certificate the
	// server may require. It is ignored when HTTPClient is set.
	TLS *TLSConfig

	// MinIndex, when set, is the index every read asks for at least
	// (X-Nops-Min-Index) from the start: the index a write of another
	// client was answered with. The client's own writes raise it.
	MinIndex uint64
}

// Client talks to the HTTP API of one Nops server.
type Client struct {
	base  *url.URL
	token string
	actor string
	http  *http.Client
	// minIndex is the highest index a write was answered with, which
	// reads ask for (read-your-writes).
	minIndex atomic.Uint64
}

// New returns a client for cfg. It does not contact the server.
func New(cfg Config) (*Client, error) {
	addr := strings.TrimSpace(cfg.Address)
	if addr == "" {
		addr = DefaultAddress
	}
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, fmt.Errorf("invalid Nops address %q: %w", cfg.Address, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("invalid Nops address %q: the scheme must be http or https", cfg.Address)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("invalid Nops address %q: no host", cfg.Address)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("invalid Nops address %q: it must not have a query or a fragment", cfg.Address)
	}
	u.Path = strings.TrimRight(u.Path, "/")
	hc := cfg.HTTPClient
	if hc == nil {
		tr := defaultTransport()
		if cfg.TLS != nil {
			if u.Scheme != "https" {
				return nil, fmt.Errorf("invalid Nops address %q: TLS options need an https:// address", cfg.Address)
			}
			tc, err := cfg.TLS.build()
			if err != nil {
				return nil, err
			}
			tr.TLSClientConfig = tc
		}
		hc = &http.Client{Transport: tr}
	}
	actor := cfg.Actor
	if actor == "" {
		actor = DefaultActor()
	}
	c := &Client{base: u, token: cfg.Token, actor: actor, http: hc}
	c.minIndex.Store(cfg.MinIndex)
	return c, nil
}

// MinIndex returns the index the client's reads ask for at least: the
// highest its writes were answered with, or Config.MinIndex.
func (c *Client) MinIndex() uint64 { return c.minIndex.Load() }

// sawWrite raises the index reads ask for to the index of a write's
// answer. A snapshot restore sets it: the restored state's index may be
// lower than those of the writes it undid.
func (c *Client) sawWrite(path string, h http.Header) {
	idx, err := strconv.ParseUint(h.Get(HeaderIndex), 10, 64)
	if err != nil {
		return
	}
	if path == snapshotPath {
		c.minIndex.Store(idx)
		return
	}
	for {
		cur := c.minIndex.Load()
		if idx <= cur || c.minIndex.CompareAndSwap(cur, idx) {
			return
		}
	}
}

func defaultTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   10 * time.Second,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
}

// DefaultActor returns <user>@<hostname> for the user running the program,
// as the server records it on the decisions of this client.
func DefaultActor() string {
	name := ""
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if name == "" {
		name = os.Getenv("USER")
	}
	if name == "" {
		name = "unknown"
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown"
	}
	return name + "@" + host
}

// Address returns the base URL the client talks to.
func (c *Client) Address() string { return c.base.String() }

// Actor returns the actor the client sends.
func (c *Client) Actor() string { return c.actor }

// APIError is an answer of the server other than 2xx.
type APIError struct {
	// StatusCode is the HTTP status of the answer.
	StatusCode int
	// Message is the server's "error" field, or the body when it was not
	// JSON.
	Message string
	// Problems lists every problem of a bad request, when the server listed
	// more than one.
	Problems []string
}

func (e *APIError) Error() string {
	msg := e.Message
	if msg == "" {
		msg = http.StatusText(e.StatusCode)
	}
	return fmt.Sprintf("%s (HTTP %d)", msg, e.StatusCode)
}

// StatusCode returns the HTTP status of an *APIError in err's chain, or 0.
func StatusCode(err error) int {
	var ae *APIError
	if errors.As(err, &ae) {
		return ae.StatusCode
	}
	return 0
}

// IsNotFound reports whether err is a 404 answer: no such object, or no such
// endpoint on an older server.
func IsNotFound(err error) bool { return StatusCode(err) == http.StatusNotFound }

// IsNoSuchEndpoint reports whether err is the 404 of a server that does not
// serve the route at all (an older server, or one without reconcilers), as
// opposed to a missing object.
func IsNoSuchEndpoint(err error) bool {
	var ae *APIError
	return errors.As(err, &ae) && ae.StatusCode == http.StatusNotFound && strings.HasPrefix(ae.Message, "no such endpoint")
}

// UnreachableError is returned when no answer came from the server: it could
// not be dialled, or the connection broke.
type UnreachableError struct {
	Address string
	Err     error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("cannot reach the Nops server at %s: %v", e.Address, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// QueryOptions are the options of a read.
type QueryOptions struct {
	// Consistent has the leader answer, after it verified its leadership,
	// instead of the local replicated state of the server asked.
	Consistent bool
	// Limit bounds the number of items of a list; 0 means no bound.
	Limit int
	// Next is the page token of QueryMeta.NextToken of the previous page.
	Next string
	// Cluster names a Nomad cluster (SPEC section 16): on a job's route
	// the cluster of the job (needed only when its namespace and ID exist
	// in more than one), on a list (jobs, deployments, orphans, events)
	// the filter.
	Cluster string
}

func (q *QueryOptions) apply(v url.Values) {
	if q == nil {
		return
	}
	if q.Consistent {
		v.Set("consistent", "")
	}
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Next != "" {
		v.Set("next", q.Next)
	}
	if q.Cluster != "" {
		v.Set("cluster", q.Cluster)
	}
}

// QueryMeta is what the headers of a read answer tell.
type QueryMeta struct {
	// LastIndex is the Raft index of the state the answer was read from.
	LastIndex uint64
	// KnownLeader reports whether the server knew a leader.
	KnownLeader bool
	// LastContact is how long since the server heard from the leader (0 on
	// the leader itself).
	LastContact time.Duration
	// NextToken, when set, is the page token of the next page.
	NextToken string
	// RequestTime is how long the request took.
	RequestTime time.Duration
}

func parseMeta(h http.Header, took time.Duration) *QueryMeta {
	m := &QueryMeta{NextToken: h.Get(HeaderNextToken), RequestTime: took}
	if v := h.Get(HeaderIndex); v != "" {
		m.LastIndex, _ = strconv.ParseUint(v, 10, 64)
	}
	if v := h.Get(HeaderKnownLeader); v != "" {
		m.KnownLeader, _ = strconv.ParseBool(v)
	}
	if v := h.Get(HeaderLastContact); v != "" {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil {
			m.LastContact = time.Duration(ms) * time.Millisecond
		}
	}
	return m
}

// request is one call of the API.
type request struct {
	method string
	path   string
	query  url.Values
	// body is encoded as JSON unless it is an io.Reader, sent as is.
	body        any
	contentType string
}

// do sends r and returns the answer when it is 2xx; the caller closes its
// body. Any other answer is decoded into an *APIError.
func (c *Client) do(ctx context.Context, r request) (*http.Response, time.Duration, error) {
	u := *c.base
	u.Path = c.base.Path + r.path
	if len(r.query) > 0 {
		u.RawQuery = r.query.Encode()
	}
	var body io.Reader
	contentType := r.contentType
	switch b := r.body.(type) {
	case nil:
	case io.Reader:
		body = b
	default:
		buf, err := json.Marshal(b)
		if err != nil {
			return nil, 0, fmt.Errorf("encode request body of %s %s: %w", r.method, r.path, err)
		}
		body = bytes.NewReader(buf)
		contentType = "application/json"
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u.String(), body)
	if err != nil {
		return nil, 0, fmt.Errorf("build request %s %s: %w", r.method, r.path, err)
	}
	if contentType == "" && r.method != http.MethodGet && r.method != http.MethodHead {
		// The server refuses a write that does not say it is JSON, even
		// one without a body (a browser's simple request cannot say so).
		contentType = "application/json"
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set(HeaderActor, c.actor)
	if c.token != "" {
		req.Header.Set(HeaderToken, c.token)
	}
	read := r.method == http.MethodGet || r.method == http.MethodHead
	if min := c.minIndex.Load(); min > 0 && read {
		req.Header.Set(HeaderMinIndex, strconv.FormatUint(min, 10))
	}
	start := time.Now()
	resp, err := c.http.Do(req)
	took := time.Since(start)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, took, fmt.Errorf("%s %s: %w", r.method, r.path, ctxErr)
		}
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, took, &UnreachableError{Address: c.base.String(), Err: err}
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, took, decodeError(resp)
	}
	if !read {
		c.sawWrite(r.path, resp.Header)
	}
	return resp, took, nil
}

func decodeError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	ae := &APIError{StatusCode: resp.StatusCode}
	var body struct {
		Error    string   `json:"error"`
		Problems []string `json:"problems"`
	}
	if err := json.Unmarshal(raw, &body); err == nil && body.Error != "" {
		ae.Message, ae.Problems = body.Error, body.Problems
	} else {
		ae.Message = strings.TrimSpace(string(raw))
	}
	return ae
}

// call sends r and decodes a JSON answer into out (nil discards it).
func (c *Client) call(ctx context.Context, r request, out any) (*QueryMeta, error) {
	resp, took, err := c.do(ctx, r)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			return nil, fmt.Errorf("decode answer of %s %s: %w", r.method, r.path, err)
		}
	} else {
		_, _ = io.Copy(io.Discard, resp.Body)
	}
	return parseMeta(resp.Header, took), nil
}

// get is a read of path into out.
func (c *Client) get(ctx context.Context, path string, query url.Values, q *QueryOptions, out any) (*QueryMeta, error) {
	if query == nil {
		query = url.Values{}
	}
	q.apply(query)
	return c.call(ctx, request{method: http.MethodGet, path: path, query: query}, out)
}

// write sends body (nil for none) with method and decodes the answer into
// out (nil discards it).
func (c *Client) write(ctx context.Context, method, path string, query url.Values, body, out any) error {
	_, err := c.call(ctx, request{method: method, path: path, query: query, body: body}, out)
	return err
}

// seg escapes one path segment.
func seg(s string) string { return url.PathEscape(s) }
