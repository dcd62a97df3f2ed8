package agent_test

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-msgpack/v2/codec"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// sameAnswer fails unless a (through a follower) and b (from the leader)
// have the same status, the same headers but for the values that move
// with time and state, and, when body is set, the same body.
func sameAnswer(t *testing.T, what string, a, b answer, body bool) {
	t.Helper()
	if a.code != b.code {
		t.Fatalf("%s: status %d through a follower, %d on the leader (%s / %s)", what, a.code, b.code, a.body, b.body)
	}
	moving := map[string]bool{"Date": true, "X-Nops-Index": true, "X-Nops-Last-Contact": true, "Content-Length": !body}
	for k, vs := range b.header {
		got := a.header.Values(k)
		if len(got) != len(vs) {
			t.Errorf("%s: header %s: %q through a follower, %q on the leader", what, k, got, vs)
			continue
		}
		if !moving[k] && strings.Join(got, "\n") != strings.Join(vs, "\n") {
			t.Errorf("%s: header %s: %q through a follower, %q on the leader", what, k, got, vs)
		}
	}
	for k := range a.header {
		if _, ok := b.header[k]; !ok {
			t.Errorf("%s: header %s through a follower only", what, k)
		}
	}
	if body && string(a.body) != string(b.body) {
		t.Errorf("%s: body through a follower:\n%s\non the leader:\n%s", what, a.body, b.body)
	}
}

// TestForward_WriteAnswersAsOnTheLeader: a write (or a consistent read)
// through a follower goes over the forwarding protocol and answers what
// the leader answers, errors included.
func TestForward_WriteAnswersAsOnTheLeader(t *testing.T) {
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers(),
		nopstest.WithConfig(func(cfg *config.Config) { cfg.ACL.Enabled = true }))
	leader := c.WaitForLeader(30 * time.Second)
	f := c.Followers()[0]
	var boot structs.ACLTokenView
	aclCall(t, leader, "", "POST", "/v1/acl/bootstrap", nil).ok(t, "bootstrap", &boot)
	syncAll(t, c)
	before := agent.FramedForwards(f.Server)

	window := `{"kind":"deny","schedule":"0 22 * * *","duration":"8h","timezone":"Europe/Paris","jobs":["web*"]}`
	fa := aclCall(t, f, boot.SecretID, "PUT", "/v1/window/nights", window)
	la := aclCall(t, leader, boot.SecretID, "PUT", "/v1/window/nights", window)
	sameAnswer(t, "write", fa, la, false)
	var fw, lw structs.SyncWindow
	fa.ok(t, "write through the follower", &fw)
	la.ok(t, "write on the leader", &lw)
	if fw.Name != "nights" || fw.ModifyIndex == 0 || lw.ModifyIndex <= fw.ModifyIndex {
		t.Fatalf("window answers: %+v then %+v", fw, lw)
	}
	checkClusterHeaders(t, "forwarded write", fa, true)

	bad := `{"kind":"maybe","schedule":"0 1 * * *","duration":"1h"}`
	fa = aclCall(t, f, boot.SecretID, "PUT", "/v1/window/bad", bad)
	la = aclCall(t, leader, boot.SecretID, "PUT", "/v1/window/bad", bad)
	if fa.code != http.StatusBadRequest {
		t.Fatalf("bad window through a follower: %d %s", fa.code, fa.body)
	}
	sameAnswer(t, "validation error", fa, la, true)

	forged := "3f1c1b7e-2a6e-4c55-9d7e-5b0c1a2b3c4d"
	fa = aclCall(t, f, forged, "POST", "/v1/pause", `{"reason":"x"}`)
	la = aclCall(t, leader, forged, "POST", "/v1/pause", `{"reason":"x"}`)
	if fa.code != http.StatusForbidden && fa.code != http.StatusUnauthorized {
		t.Fatalf("forged token through a follower: %d %s", fa.code, fa.body)
	}
	sameAnswer(t, "forged token", fa, la, true)
	fa = aclCall(t, f, "", "DELETE", "/v1/window/nights", nil)
	la = aclCall(t, leader, "", "DELETE", "/v1/window/nights", nil)
	sameAnswer(t, "no token", fa, la, true)

	if got := agent.FramedForwards(f.Server) - before; got != 4 {
		t.Fatalf("%d writes went over the forwarding protocol, want 4", got)
	}
	// A consistent read takes the same transport, and answers as on the
	// leader.
	fa = aclCall(t, f, boot.SecretID, "GET", "/v1/window/nights?consistent", nil)
	la = aclCall(t, leader, boot.SecretID, "GET", "/v1/window/nights?consistent", nil)
	sameAnswer(t, "consistent read", fa, la, true)
	if got := agent.FramedForwards(f.Server) - before; got != 5 {
		t.Fatalf("%d requests went over the forwarding protocol, want 5", got)
	}
}

// TestForward_MutualTLS: with RPC TLS the forwarding protocol runs inside
// mutual TLS, and a peer without a server certificate of the cluster never
// reaches it.
func TestForward_MutualTLS(t *testing.T) {
	files := nopstest.NewTLS(t, "")
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers(), nopstest.WithTLS(files, false))
	leader := c.WaitForLeader(30 * time.Second)
	f := c.Followers()[0]
	call(t, f, "POST", "/v1/pause", []byte(`{"reason":"tls"}`)).ok(t, "write through a follower", nil)
	if agent.FramedForwards(f.Server) == 0 {
		t.Fatal("the write did not go over the forwarding protocol")
	}

	other := nopstest.NewTLS(t, "")
	for _, a := range []struct {
		name string
		dial func(string) (net.Conn, error)
	}{
		{"plain TCP", plainDial(agent.RPCForwardByte)},
		{"TLS with a certificate of another CA", tlsDial(t, other.ServerCertFile, other.ServerKeyFile, agent.RPCForwardByte)},
		{"TLS with a CLI certificate of the cluster's CA", tlsDial(t, files.CLICertFile, files.CLIKeyFile, agent.RPCForwardByte)},
	} {
		t.Run(a.name, func(t *testing.T) {
			if v, err := forwardVersion(a.dial, leader.RPCAddr()); err == nil {
				t.Fatalf("the forwarding protocol answered %#x", v)
			}
		})
	}
	if v, err := forwardVersion(tlsDial(t, files.ServerCertFile, files.ServerKeyFile, agent.RPCForwardByte), leader.RPCAddr()); err != nil || v != agent.ForwardVersionByte {
		t.Fatalf("a server certificate should open the forwarding protocol: %#x, %v", v, err)
	}
}

// forwardVersion opens the forwarding protocol and reads the version byte.
func forwardVersion(dial func(string) (net.Conn, error), addr string) (byte, error) {
	conn, err := dial(addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	var b [1]byte
	_, err = io.ReadFull(conn, b[:])
	return b[0], err
}

// rawForward is an attacker's (or a test's) forwarding connection.
type rawForward struct {
	t    *testing.T
	conn net.Conn
	br   *bufio.Reader
	h    *codec.MsgpackHandle
}

type rawRequest struct {
	ID     uint64      `codec:"id"`
	Method string      `codec:"method"`
	URI    string      `codec:"uri"`
	Host   string      `codec:"host"`
	Header http.Header `codec:"header"`
	Body   []byte      `codec:"body"`
}

type rawResponse struct {
	ID     uint64      `codec:"id"`
	Status int         `codec:"status"`
	Header http.Header `codec:"header"`
	Body   []byte      `codec:"body"`
}

func openForward(t *testing.T, addr string) *rawForward {
	t.Helper()
	conn, err := plainDial(agent.RPCForwardByte)(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	f := &rawForward{t: t, conn: conn, br: bufio.NewReader(conn), h: structs.NewMsgpackHandle()}
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	v, err := f.br.ReadByte()
	if err != nil || v != agent.ForwardVersionByte {
		t.Fatalf("version byte: %#x, %v", v, err)
	}
	return f
}

func (f *rawForward) send(req rawRequest) error {
	var body []byte
	if err := codec.NewEncoderBytes(&body, f.h).Encode(req); err != nil {
		return err
	}
	frame := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
	_, err := f.conn.Write(append(frame, body...))
	return err
}

func (f *rawForward) receive() (rawResponse, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(f.br, hdr[:]); err != nil {
		return rawResponse{}, err
	}
	buf := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	if _, err := io.ReadFull(f.br, buf); err != nil {
		return rawResponse{}, err
	}
	var resp rawResponse
	err := codec.NewDecoderBytes(buf, f.h).Decode(&resp)
	return resp, err
}

// closedWithin fails unless the server closes the connection within d,
// sending nothing.
func closedWithin(t *testing.T, conn net.Conn, d time.Duration) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(d))
	n, err := conn.Read(make([]byte, 64))
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server kept the connection open for %s", d)
	}
	if n > 0 || err == nil {
		t.Fatalf("the server answered %d bytes", n)
	}
}

func pauseRequest(id uint64, host string) rawRequest {
	return rawRequest{ID: id, Method: "POST", URI: "/v1/pause", Host: host,
		Header: http.Header{"Content-Type": {"application/json"}, "X-Nops-Actor": {"raw"}},
		Body:   []byte(`{"reason":"raw"}`)}
}

// TestForward_Attacks: whatever a peer sends after the protocol byte, the
// leader closes that connection (or answers it) and keeps serving the
// writes followers forward.
func TestForward_Attacks(t *testing.T) {
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers(), nopstest.WithConfig(func(cfg *config.Config) {
		cfg.HTTPIdleTimeout = 2 * time.Second
		cfg.HTTPReadTimeout = 2 * time.Second
	}))
	leader := c.WaitForLeader(30 * time.Second)
	addr := leader.RPCAddr()
	follower := c.Followers()[0]
	// A new connection for each write: a kept-alive one races the
	// follower's short idle timeout while a subtest waits.
	fresh := *follower.HTTPClient()
	if tr, ok := fresh.Transport.(*http.Transport); ok {
		tr = tr.Clone()
		tr.DisableKeepAlives = true
		fresh.Transport = tr
	} else {
		fresh.Transport = &http.Transport{DisableKeepAlives: true}
	}
	fresh.Timeout = 60 * time.Second
	stillServes := func(t *testing.T) {
		t.Helper()
		before := agent.FramedForwards(follower.Server)
		req, err := http.NewRequest("POST", follower.URL+"/v1/pause", strings.NewReader(`{"reason":"after"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Nops-Actor", "tester")
		nopstest.SetContentType(req)
		resp, err := fresh.Do(req)
		if err != nil {
			t.Fatalf("write through a follower: %v", err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("write through a follower: %d %s", resp.StatusCode, body)
		}
		if agent.FramedForwards(follower.Server) != before+1 {
			t.Fatal("the write did not go over the forwarding protocol")
		}
	}
	stillServes(t)

	t.Run("garbage after the protocol byte", func(t *testing.T) {
		f := openForward(t, addr)
		_, _ = io.WriteString(f.conn, "GET /v1/agent/self HTTP/1.1\r\nHost: nops\r\n\r\n")
		closedWithin(t, f.conn, 5*time.Second)
		stillServes(t)
	})
	t.Run("a frame that does not decode", func(t *testing.T) {
		f := openForward(t, addr)
		_, _ = f.conn.Write(append(binary.BigEndian.AppendUint32(nil, 16), "\xc1\xc1\xc1\xc1\xc1\xc1\xc1\xc1\xc1\xc1\xc1\xc1\xc1\xc1\xc1\xc1"...))
		closedWithin(t, f.conn, 5*time.Second)
		stillServes(t)
	})
	t.Run("a frame that claims a huge collection", func(t *testing.T) {
		f := openForward(t, addr)
		// A map of 2^32-1 entries, then nothing.
		_, _ = f.conn.Write(append(binary.BigEndian.AppendUint32(nil, 5), 0xdf, 0xff, 0xff, 0xff, 0xff))
		closedWithin(t, f.conn, 5*time.Second)
		stillServes(t)
	})
	t.Run("a frame over the limit", func(t *testing.T) {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		for _, n := range []uint32{agent.ForwardMaxFrame + 1, 1<<32 - 1} {
			f := openForward(t, addr)
			_, _ = f.conn.Write(binary.BigEndian.AppendUint32(nil, n))
			_, _ = f.conn.Write(make([]byte, 4096))
			closedWithin(t, f.conn, 5*time.Second)
		}
		runtime.ReadMemStats(&m1)
		if grown := m1.TotalAlloc - m0.TotalAlloc; grown > agent.ForwardMaxFrame {
			t.Fatalf("the server allocated %d bytes for frames it refused", grown)
		}
		stillServes(t)
	})
	t.Run("a truncated frame", func(t *testing.T) {
		f := openForward(t, addr)
		_, _ = f.conn.Write(append(binary.BigEndian.AppendUint32(nil, 100), make([]byte, 10)...))
		// The frame must arrive whole within the read timeout.
		closedWithin(t, f.conn, 10*time.Second)
		f = openForward(t, addr)
		_, _ = f.conn.Write(append(binary.BigEndian.AppendUint32(nil, 100), make([]byte, 10)...))
		f.conn.Close()
		stillServes(t)
	})
	t.Run("a peer that sends nothing", func(t *testing.T) {
		f := openForward(t, addr)
		// Closed after the idle timeout.
		closedWithin(t, f.conn, 10*time.Second)
		stillServes(t)
	})
	t.Run("bad requests in good frames", func(t *testing.T) {
		f := openForward(t, addr)
		for i, req := range []rawRequest{
			{ID: 1, Method: "PO ST", URI: "/v1/pause", Host: addr},
			{ID: 2, Method: "POST", URI: "not a uri", Host: addr},
			{ID: 3, Method: "POST", URI: "/v1/pause", Host: addr, Header: http.Header{"Bad\nName": {"x"}}},
			{ID: 4, Method: "POST", URI: "/v1/pause", Host: addr, Header: http.Header{"X-Nops-Actor": {"a\r\nb"}}},
		} {
			if err := f.send(req); err != nil {
				t.Fatal(err)
			}
			resp, err := f.receive()
			if err != nil || resp.ID != req.ID || resp.Status != http.StatusBadRequest {
				t.Fatalf("request %d: %+v, %v", i, resp, err)
			}
		}
		stillServes(t)
	})
	t.Run("headers over the HTTP limit", func(t *testing.T) {
		f := openForward(t, addr)
		big := pauseRequest(1, addr)
		big.Header = big.Header.Clone()
		big.Header.Set("X-Big", strings.Repeat("a", 64<<10))
		if err := f.send(big); err != nil {
			t.Fatal(err)
		}
		resp, err := f.receive()
		if err != nil || resp.ID != 1 || resp.Status != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("headers over the limit: %d %s, %v", resp.Status, resp.Body, err)
		}
		if err := f.send(pauseRequest(2, addr)); err != nil {
			t.Fatal(err)
		}
		if resp, err := f.receive(); err != nil || resp.ID != 2 || resp.Status != http.StatusOK {
			t.Fatalf("request after the refused one: %d %s, %v", resp.Status, resp.Body, err)
		}
		stillServes(t)
	})
	t.Run("many pipelined requests", func(t *testing.T) {
		f := openForward(t, addr)
		const n = 1000
		go func() {
			for i := uint64(1); i <= n; i++ {
				if f.send(pauseRequest(i, addr)) != nil {
					return
				}
			}
		}()
		seen := map[uint64]bool{}
		for len(seen) < n {
			resp, err := f.receive()
			if err != nil {
				t.Fatalf("after %d answers: %v", len(seen), err)
			}
			if seen[resp.ID] || resp.ID == 0 || resp.ID > n {
				t.Fatalf("answer for ID %d (answered before: %v)", resp.ID, seen[resp.ID])
			}
			seen[resp.ID] = true
			if resp.Status != http.StatusOK {
				t.Fatalf("answer %d: %d %s", resp.ID, resp.Status, resp.Body)
			}
		}
		if peak := agent.ForwardPeak(leader.Server); peak > agent.ForwardMaxInFlight || peak < 2 {
			t.Fatalf("the leader ran %d requests at once, want 2 to %d", peak, agent.ForwardMaxInFlight)
		}
		stillServes(t)
	})
}

// TestForward_LeaderShutdownDrains: a leader that shuts down while
// forwarded writes run answers each write it read, 200 or an error with a
// status, closes the connection, and its Shutdown ends within the grace
// the HTTP servers have.
func TestForward_LeaderShutdownDrains(t *testing.T) {
	c, leader := startBareCluster(t)
	addr := leader.RPCAddr()
	f := openForward(t, addr)
	const n = 200
	go func() {
		for i := uint64(1); i <= n; i++ {
			if f.send(pauseRequest(i, addr)) != nil {
				return
			}
		}
	}()
	resp, err := f.receive()
	if err != nil || resp.Status != http.StatusOK {
		t.Fatalf("first answer: %+v, %v", resp, err)
	}
	stopped := make(chan time.Duration, 1)
	go func() {
		begin := time.Now()
		c.Kill(c.Index(leader))
		stopped <- time.Since(begin)
	}()
	answered := 1
	for {
		resp, err := f.receive()
		if err != nil {
			break
		}
		answered++
		if resp.ID == 0 || resp.ID > n || resp.Status == 0 || resp.Status != http.StatusOK && len(resp.Body) == 0 {
			t.Fatalf("answer during the shutdown: %+v", resp)
		}
	}
	select {
	case d := <-stopped:
		if d > agent.ShutdownGrace+3*time.Second {
			t.Fatalf("Shutdown took %s", d)
		}
	case <-time.After(agent.ShutdownGrace + 10*time.Second):
		t.Fatal("Shutdown did not return")
	}
	t.Logf("%d of %d writes answered", answered, n)
}
