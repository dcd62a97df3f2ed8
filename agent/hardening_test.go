package agent_test

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
	"github.com/klauspost/compress/zstd"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/agent/snapshot"
	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// stateBytes frames FSM snapshot records as fsm writes them (header, then
// a zstd stream of [type][length][msgpack] records and the end record
// counting them): the attacker's side of the format, written out here so
// that a test cannot lean on the code it attacks.
func stateBytes(t testing.TB, records ...stateRecord) []byte {
	t.Helper()
	return compressState(t, recordBytes(t, records...))
}

// compressState puts the header of format 3 before records, compressed.
func compressState(t testing.TB, records ...[]byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	buf.WriteString("NOPSSNP\x03")
	zw, err := zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range records {
		if _, err := zw.Write(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// zstdBomb returns a state of one record that claims claim bytes and holds
// zeros bytes of zeros.
func zstdBomb(t testing.TB, claim uint32, zeros int) []byte {
	t.Helper()
	hdr := binary.BigEndian.AppendUint32([]byte{byte(fsm.RepoStatusSnapshot)}, claim)
	chunk := make([]byte, 1<<20)
	parts := [][]byte{hdr}
	for n := 0; n < zeros; n += len(chunk) {
		parts = append(parts, chunk)
	}
	return compressState(t, parts...)
}

// recordBytes frames records, and the end record counting them.
func recordBytes(t testing.TB, records ...stateRecord) []byte {
	t.Helper()
	var out []byte
	h := structs.NewMsgpackHandle()
	frame := func(kind byte, body []byte) {
		var hdr [5]byte
		hdr[0] = kind
		binary.BigEndian.PutUint32(hdr[1:], uint32(len(body)))
		out = append(append(out, hdr[:]...), body...)
	}
	for _, r := range records {
		body := r.raw
		if body == nil {
			if err := codec.NewEncoderBytes(&body, h).Encode(r.obj); err != nil {
				t.Fatal(err)
			}
		}
		frame(byte(r.kind), body)
	}
	var end [8]byte
	binary.BigEndian.PutUint64(end[:], uint64(len(records)))
	frame(255, end[:])
	return out
}

type stateRecord struct {
	kind fsm.SnapshotType
	obj  any
	raw  []byte
}

// archiveOf wraps a state in a well-formed archive with the given Raft
// index: checksums and all, so that only what is inside is wrong.
func archiveOf(t testing.TB, index uint64, state io.Reader) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := snapshot.Write(&buf, &raft.SnapshotMeta{ID: "1-1-1", Index: index, Term: 1, Version: 1}, state); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// gzipBomb returns a few hundred kilobytes of archive whose state claims
// claim bytes and holds zeros.
func gzipBomb(t testing.TB, claim int64, zeros int64) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := writeBomb(&buf, claim, zeros); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// heapWatch samples the heap in use while fn runs and returns the largest
// growth over what it was before.
func heapWatch(fn func()) uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	base := m.HeapAlloc
	var peak atomic.Uint64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > peak.Load() {
				peak.Store(m.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	fn()
	close(stop)
	wg.Wait()
	if p := peak.Load(); p > base {
		return p - base
	}
	return 0
}

// TestSnapshotRestoreRefusesMaliciousArchives sends each archive an
// attacker could craft to a real server over TCP: each is refused with 400
// and its reason, the state does not change, the server's heap stays
// bounded and it goes on serving.
func TestSnapshotRestoreRefusesMaliciousArchives(t *testing.T) {
	const limit = 64 << 20
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithConfig(func(c *config.Config) {
		c.SnapshotMaxSize = limit
	}))
	call(t, s, "PUT", "/v1/window/nights", []byte(`{"kind":"deny","schedule":"0 22 * * *","duration":"8h"}`)).ok(t, "window", nil)
	before := stateDigest(t, s.State())

	at := time.Date(2025, 3, 1, 9, 0, 0, 0, time.UTC)
	meta := stateRecord{kind: fsm.MetaSnapshot, obj: map[string]any{"Key": "meta", "LatestIndex": 10, "EventSeq": 1}}
	dep := func(id string, state structs.DeploymentState) stateRecord {
		return stateRecord{kind: fsm.DeploymentSnapshot, obj: &structs.Deployment{ID: id, Namespace: "default", JobID: "web",
			State: state, CreatedAt: at, UpdatedAt: at, StateEnteredAt: at}}
	}
	state := func(records ...stateRecord) []byte {
		return archiveOf(t, 20, bytes.NewReader(stateBytes(t, records...)))
	}

	// A refusal adds at most 48 MB to the heap.
	grows := map[string]uint64{}
	for _, tc := range []struct {
		name string
		body []byte
		want string
	}{
		// 8 GiB claimed, a few hundred kilobytes sent.
		{"gzip bomb", gzipBomb(t, 8<<30, 256<<20), "over the limit"},
		// A record that claims 255 MB and holds as many zeros: some
		// kilobytes compressed, within the archive's limit; refused from
		// its header, before it is read.
		{"zstd bomb", archiveOf(t, 20, bytes.NewReader(zstdBomb(t, 255<<20, 255<<20))), "claims 267386880 bytes, more than the 67108864 left of the limit of 67108864 bytes"},
		// Within the limit, well formed, zeros: kept on disk, not in
		// memory, and refused by the state's header.
		{"zeros under the limit", archiveOf(t, 20, io.LimitReader(zeroReader{}, limit-1<<20)), "not a Nops state snapshot"},
		{"huge slice length", state(meta, stateRecord{kind: fsm.DeploymentSnapshot,
			raw: []byte{0x81, 0xa5, 'h', 'o', 'o', 'k', 's', 0xdd, 0x7f, 0xff, 0xff, 0xff}}), "decode snapshot deployments record"},
		{"nil time", state(meta, stateRecord{kind: fsm.EventSnapshot, raw: []byte{0x94, 0x01, 0xc0, 0xa1, 'j', 0xa1, 'o'}}), "has no time"},
		{"index 2^64-1", archiveOf(t, math.MaxUint64, bytes.NewReader(stateBytes(t, meta))), "snapshot index 18446744073709551615 is out of range"},
		{"exploded deployment", state(meta, dep("d1", "exploded")), `state "exploded"`},
		{"two approved deployments", state(meta, dep("d1", structs.StateApplying), dep("d2", structs.StatePreHook)), "two active deployments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var a answer
			grew := heapWatch(func() { a = call(t, s, "PUT", "/v1/operator/snapshot", tc.body) })
			if a.code != http.StatusBadRequest || !strings.Contains(a.errorMessage(), tc.want) {
				t.Fatalf("restore of a %d-byte archive: %d %s; want 400 saying %q", len(tc.body), a.code, a.body, tc.want)
			}
			bound, ok := grows[tc.name]
			if !ok {
				bound = 48 << 20
			}
			if grew > bound {
				t.Fatalf("a %d-byte archive grew the server's heap by %d MB", len(tc.body), grew>>20)
			}
			t.Logf("%d-byte archive refused; heap grew by at most %.1f MB", len(tc.body), float64(grew)/(1<<20))
			if got := stateDigest(t, s.State()); got != before {
				t.Fatalf("a refused restore changed the state:\n%s\nwant\n%s", got, before)
			}
			call(t, s, "GET", "/v1/windows", nil).ok(t, "read after a refused restore", nil)
		})
	}
}

// TestSnapshotRestoreOneAtATime: a server reads one snapshot restore at a
// time, and a second one while the first is under way answers 409; a
// state whose records are each small but whose whole passes the limit is
// refused with 400 naming the limit.
func TestSnapshotRestoreOneAtATime(t *testing.T) {
	const limit = 1 << 20
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithConfig(func(c *config.Config) {
		c.SnapshotMaxSize = limit
	}))
	before := stateDigest(t, s.State())

	// The first restore's upload stays open while the second is sent.
	pr, pw := io.Pipe()
	first := make(chan answer, 1)
	go func() {
		req, _ := http.NewRequest("PUT", s.URL+"/v1/operator/snapshot", pr)
		req.Header.Set("Content-Type", "application/x-nops-snapshot")
		resp, err := s.HTTPClient().Do(req)
		if err != nil {
			first <- answer{body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		first <- answer{code: resp.StatusCode, body: raw}
	}()
	if _, err := pw.Write([]byte{0x1f, 0x8b}); err != nil {
		t.Fatal(err)
	}
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		a := call(t, s, "PUT", "/v1/operator/snapshot", []byte("not a snapshot"))
		return a.code == http.StatusConflict && strings.Contains(a.errorMessage(), "already in progress"),
			fmt.Errorf("a second restore during the first: %d %s; want 409", a.code, a.body)
	})
	pw.Close()
	if a := <-first; a.code != http.StatusBadRequest {
		t.Fatalf("the first, cut, restore: %d %s; want 400", a.code, a.body)
	}

	// Once the first is done, the next is read: 20,000 records of a few
	// bytes each, 400 KB in a limit of 1 MiB, but more records than it
	// admits.
	records := []stateRecord{{kind: fsm.MetaSnapshot, obj: map[string]any{"Key": "meta", "LatestIndex": 10, "EventSeq": 1}}}
	for i := range 20000 {
		records = append(records, stateRecord{kind: fsm.RepoStatusSnapshot, obj: map[string]string{"name": fmt.Sprintf("r%05d", i)}})
	}
	body := archiveOf(t, 20, bytes.NewReader(stateBytes(t, records...)))
	a := call(t, s, "PUT", "/v1/operator/snapshot", body)
	if want := "past the limit of 1048576 bytes for the whole state"; a.code != http.StatusBadRequest || !strings.Contains(a.errorMessage(), want) {
		t.Fatalf("restore of %d small records: %d %s; want 400 saying %q", len(records), a.code, a.body, want)
	}
	if got := stateDigest(t, s.State()); got != before {
		t.Fatalf("a refused restore changed the state:\n%s\nwant\n%s", got, before)
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// TestPoisonedLogEntryKillsNoServer appends entries no server can decode
// (garbage under a known type, and an unknown type) to a real cluster's
// log: every server refuses them alike and goes on, and comes back from a
// restart that replays them.
func TestPoisonedLogEntryKillsNoServer(t *testing.T) {
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers())
	leader := c.Leader()
	for _, data := range [][]byte{
		{byte(structs.PauseRequestType), 0xc1, 0xff, 0x00},
		{byte(structs.DeploymentCreateRequestType), 0x81, 0xaa, 'd', 'e', 'p', 'l', 'o', 'y', 'm', 'e', 'n', 't', 0xdd, 0x7f, 0xff, 0xff, 0xff},
		{99, 0x01, 0x02, 0x03},
	} {
		f := leader.Raft().Apply(data, 10*time.Second)
		if err := f.Error(); err != nil {
			t.Fatalf("append the entry: %v", err)
		}
		if err, _ := f.Response().(error); !errors.Is(err, fsm.ErrBadEntry) {
			t.Fatalf("entry %x answered %v, want ErrBadEntry", data, f.Response())
		}
	}
	call(t, leader, "PUT", "/v1/window/after", []byte(`{"kind":"deny","schedule":"0 22 * * *","duration":"8h"}`)).ok(t, "write after the poison", nil)
	want := stateDigest(t, leader.State())
	same := func(st *fsm.StateStore) error {
		if got := stateDigest(t, st); got != want {
			return fmt.Errorf("state differs:\n%s\nwant\n%s", got, want)
		}
		return nil
	}
	waitEverywhere(t, c, 10*time.Second, same)
	// Each server replays the poisoned entries from its log at restart.
	for i := range c.Size() {
		c.Restart(i)
		c.WaitForLeader(30 * time.Second)
	}
	waitEverywhere(t, c, 20*time.Second, same)
	call(t, c.Leader(), "PUT", "/v1/window/later", []byte(`{"kind":"deny","schedule":"0 23 * * *","duration":"1h"}`)).ok(t, "write after the restarts", nil)
}

// rawConn opens a TCP connection to a server's HTTP port.
func rawConn(t *testing.T, s *nopstest.Server) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", s.HTTPAddr())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// closedByServer reads until the server closes the connection, and fails
// when it is still open after wait (much longer than the server's
// timeouts).
func closedByServer(t *testing.T, conn net.Conn, wait time.Duration) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(wait))
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection is still open after %s", wait)
	}
}

// TestHTTPTimeoutsCloseSlowAndIdleConnections holds connections open the
// way a slow-loris client does: the server closes them.
func TestHTTPTimeoutsCloseSlowAndIdleConnections(t *testing.T) {
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithConfig(func(c *config.Config) {
		c.HTTPReadTimeout, c.HTTPIdleTimeout = time.Second, time.Second
	}))
	host := s.HTTPAddr()

	t.Run("slow body", func(t *testing.T) {
		conn := rawConn(t, s)
		fmt.Fprintf(conn, "POST /v1/pause HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"re", host)
		closedByServer(t, conn, 15*time.Second)
		if p, _ := s.State().Pauses(); len(p) != 0 {
			t.Fatalf("a cut request paused jobs: %v", p)
		}
	})
	t.Run("slow headers", func(t *testing.T) {
		conn := rawConn(t, s)
		fmt.Fprintf(conn, "GET /v1/health HTTP/1.1\r\nHost: %s\r\nX-Slow: ", host)
		closedByServer(t, conn, 15*time.Second)
	})
	t.Run("idle keep-alive", func(t *testing.T) {
		conn := rawConn(t, s)
		fmt.Fprintf(conn, "GET /v1/health HTTP/1.1\r\nHost: %s\r\n\r\n", host)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		closedByServer(t, conn, 15*time.Second)
	})
	t.Run("huge headers", func(t *testing.T) {
		conn := rawConn(t, s)
		fmt.Fprintf(conn, "GET /v1/health HTTP/1.1\r\nHost: %s\r\nX-Big: %s\r\n\r\n", host, strings.Repeat("a", 200<<10))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("200 KB of headers: status %d", resp.StatusCode)
		}
	})
}

// TestWritesFromBrowsersAreGuarded sends what a hostile web page can make a
// browser send, and other wrong requests: each is refused with its status
// and changes nothing.
func TestWritesFromBrowsersAreGuarded(t *testing.T) {
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithConfig(func(c *config.Config) {
		c.HTTPAllowedOrigins = []string{"https://nops.example.com"}
	}))
	send := func(method, path, contentType string, header map[string]string, body string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, s.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		for k, v := range header {
			if k == "Host" {
				req.Host = v
				continue
			}
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	self := "http://" + s.HTTPAddr()
	pause := `{"reason":"x"}`
	for _, tc := range []struct {
		name        string
		contentType string
		header      map[string]string
		body        string
		want        int
	}{
		{"text/plain", "text/plain", nil, pause, http.StatusUnsupportedMediaType},
		{"form", "application/x-www-form-urlencoded", nil, "reason=x", http.StatusUnsupportedMediaType},
		{"multipart", "multipart/form-data; boundary=x", nil, "--x--", http.StatusUnsupportedMediaType},
		{"no content type, a body", "", nil, pause, http.StatusUnsupportedMediaType},
		{"same host and port by another scheme", "application/json", map[string]string{"Origin": "https://" + s.HTTPAddr()}, pause, http.StatusForbidden},
		{"cross-origin", "application/json", map[string]string{"Origin": "https://evil.example"}, pause, http.StatusForbidden},
		{"null origin", "application/json", map[string]string{"Origin": "null"}, pause, http.StatusForbidden},
		{"same origin by a host name (DNS rebinding)", "application/json",
			map[string]string{"Origin": "http://rebind.evil.example:" + portOf(s), "Host": "rebind.evil.example:" + portOf(s)}, pause, http.StatusForbidden},
		{"oversize body", "application/json", nil, `{"reason":"` + strings.Repeat("a", 2<<20) + `"}`, http.StatusRequestEntityTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if resp := send("POST", "/v1/pause", tc.contentType, tc.header, tc.body); resp.StatusCode != tc.want {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.want)
			}
			if p, _ := s.State().Pauses(); len(p) != 0 {
				t.Fatalf("a refused request paused jobs")
			}
		})
	}
	// A chunked oversize body, with no length to refuse it by.
	req, _ := http.NewRequest("POST", s.URL+"/v1/pause", io.MultiReader(strings.NewReader(`{"reason":"`), io.LimitReader(zeroReader{}, 3<<20)))
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked oversize body: %v %v", resp, err)
	}

	// The server's own origin, an allowed origin and a client without
	// Origin (the CLI) may write.
	for _, origin := range []string{self, "https://nops.example.com", ""} {
		h := map[string]string{}
		if origin != "" {
			h["Origin"] = origin
		}
		if resp := send("POST", "/v1/pause", "application/json; charset=utf-8", h, pause); resp.StatusCode != http.StatusOK {
			t.Fatalf("pause from origin %q: %d", origin, resp.StatusCode)
		}
		if resp := send("POST", "/v1/resume", "application/json", h, pause); resp.StatusCode != http.StatusOK {
			t.Fatalf("resume from origin %q: %d", origin, resp.StatusCode)
		}
	}
	// A wrong method on a known path is 405 with what is allowed.
	for _, tc := range []struct{ method, path, allow string }{
		{"POST", "/v1/pauses", "GET"},
		{"GET", "/v1/pause", "POST"},
		{"PATCH", "/v1/window/w", "GET, PUT, DELETE"},
	} {
		resp := send(tc.method, tc.path, "application/json", nil, "")
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != tc.allow {
			t.Fatalf("%s %s: %d Allow %q, want 405 Allow %q", tc.method, tc.path, resp.StatusCode, resp.Header.Get("Allow"), tc.allow)
		}
	}
	if resp := send("GET", "/v1/nothing-here", "", nil, ""); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("unknown path: %d", resp.StatusCode)
	}
	// A snapshot restore needs its archive type.
	if resp := send("PUT", "/v1/operator/snapshot", "text/plain", nil, "x"); resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Fatalf("restore as text/plain: %d", resp.StatusCode)
	}
}

// TestWriteWithoutBodyNeedsNoContentType: a write with no body needs no
// Content-Type (curl -X POST …/v1/acl/bootstrap); one with a body still
// needs JSON.
func TestWriteWithoutBodyNeedsNoContentType(t *testing.T) {
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithConfig(func(c *config.Config) { c.ACL.Enabled = true }))
	post := func(contentType, body string) (int, string) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest("POST", s.URL+"/v1/acl/bootstrap", rd)
		if err != nil {
			t.Fatal(err)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	for _, tc := range []struct{ name, contentType, body string }{
		{"a body without Content-Type", "", "{}"},
		{"a body as text/plain", "text/plain", "{}"},
		{"a form body", "application/x-www-form-urlencoded", "a=b"},
	} {
		if code, body := post(tc.contentType, tc.body); code != http.StatusUnsupportedMediaType {
			t.Fatalf("%s: %d %s, want 415", tc.name, code, body)
		}
	}
	code, body := post("", "")
	if code != http.StatusOK || !strings.Contains(body, "secret_id") {
		t.Fatalf("bootstrap without body or Content-Type: %d %s", code, body)
	}
}

// TestOriginSchemeOverTLS: an HTTPS server refuses a write whose Origin is
// its own host and port over plain http, and accepts its own https origin.
func TestOriginSchemeOverTLS(t *testing.T) {
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithTLS(nopstest.NewTLS(t, ""), true))
	pause := func(origin string) int {
		t.Helper()
		req, err := http.NewRequest("POST", s.URL+"/v1/job/default/web/pause", strings.NewReader(`{"reason":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Origin", origin)
		resp, err := s.HTTPClient().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := pause("http://" + s.HTTPAddr()); code != http.StatusForbidden {
		t.Fatalf("origin http:// on an https server: %d, want 403", code)
	}
	if p, _ := s.State().Pauses(); len(p) != 0 {
		t.Fatalf("a refused request paused a job: %+v", p)
	}
	if code := pause("https://" + s.HTTPAddr()); code != http.StatusOK {
		t.Fatalf("the server's own https origin: %d, want 200", code)
	}
}

func portOf(s *nopstest.Server) string {
	_, p, _ := net.SplitHostPort(s.HTTPAddr())
	return p
}

// TestHTTPConnectionCap: connections past http_max_conns wait to be served
// until one of those served closes.
func TestHTTPConnectionCap(t *testing.T) {
	s := nopstest.Start(t, "", nopstest.WithoutReconcilers(), nopstest.WithConfig(func(c *config.Config) {
		c.HTTPMaxConns = 2
	}))
	// Two connections that hold their request open take both places.
	var held []net.Conn
	for range 2 {
		conn := rawConn(t, s)
		fmt.Fprintf(conn, "GET /v1/health HTTP/1.1\r\nHost: %s\r\n", s.HTTPAddr())
		held = append(held, conn)
	}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	if resp, err := client.Get(s.URL + "/v1/health"); err == nil {
		resp.Body.Close()
		t.Fatalf("a third connection was served while two were held: %d", resp.StatusCode)
	}
	held[0].Close()
	testutil.WaitForResult(t, 20*time.Second, func() (bool, error) {
		resp, err := client.Get(s.URL + "/v1/health")
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return true, nil
	})
}
