package agent_test

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestForward_SnapshotStreams: a snapshot goes through a follower over the
// forwarding protocol in bounded frames, both ways: an upload larger than
// any frame reaches the leader's checks and answers what the leader
// answers, and a saved state larger than a chunk comes back whole (it
// restores).
func TestForward_SnapshotStreams(t *testing.T) {
	c, leader := startBareCluster(t)
	f := c.Followers()[0]

	junk := make([]byte, 3<<20)
	if _, err := rand.Read(junk); err != nil {
		t.Fatal(err)
	}
	before := agent.FramedForwards(f.Server)
	fa := call(t, f, "PUT", "/v1/operator/snapshot", junk)
	la := call(t, leader, "PUT", "/v1/operator/snapshot", junk)
	if fa.code != http.StatusBadRequest {
		t.Fatalf("a 3 MiB upload through a follower: %d %s", fa.code, fa.body)
	}
	sameAnswer(t, "junk upload", fa, la, true)
	if agent.FramedForwards(f.Server) != before+1 {
		t.Fatal("the upload did not go over the forwarding protocol")
	}

	// Random job names: a state that compresses to more than a chunk.
	for i := 0; i < 4; i++ {
		jobs := make([]string, 2000)
		for j := range jobs {
			b := make([]byte, 64)
			_, _ = rand.Read(b)
			jobs[j] = hex.EncodeToString(b)
		}
		body := fmt.Sprintf(`{"kind":"deny","schedule":"0 22 * * *","duration":"1h","jobs":["%s"]}`, strings.Join(jobs, `","`))
		call(t, f, "PUT", fmt.Sprintf("/v1/window/w%d", i), []byte(body)).ok(t, "window", nil)
	}
	saved := call(t, f, "GET", "/v1/operator/snapshot", nil)
	if saved.code != http.StatusOK || len(saved.body) < agent.ForwardChunk {
		t.Fatalf("snapshot save through a follower: %d, %d bytes; want 200 and over %d bytes", saved.code, len(saved.body), agent.ForwardChunk)
	}
	call(t, f, "PUT", "/v1/operator/snapshot", saved.body).ok(t, "restore through a follower", nil)
	if got := agent.FramedForwards(f.Server) - before; got != 7 {
		t.Fatalf("%d requests went over the forwarding protocol, want 7", got)
	}
}

// TestForward_MiddlewareRunsOnTheLeader: a follower forwards a request
// that needs the leader before its own middleware: the leader's guard
// refuses a write from a foreign origin or with a wrong content type, with
// the answer it gives itself.
func TestForward_MiddlewareRunsOnTheLeader(t *testing.T) {
	c, leader := startBareCluster(t)
	f := c.Followers()[0]
	send := func(s *nopstest.Server, header http.Header) answer {
		req, err := http.NewRequest("POST", s.URL+"/v1/pause", strings.NewReader(`{"reason":"x"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header = header
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return answer{code: resp.StatusCode, body: body, header: resp.Header}
	}
	for _, tc := range []struct {
		name   string
		header http.Header
		code   int
	}{
		{"foreign origin", http.Header{"Content-Type": {"application/json"}, "Origin": {"http://evil.example"}}, http.StatusForbidden},
		{"text body", http.Header{"Content-Type": {"text/plain"}}, http.StatusUnsupportedMediaType},
	} {
		before := agent.FramedForwards(f.Server)
		fa, la := send(f, tc.header), send(leader, tc.header)
		if fa.code != tc.code {
			t.Fatalf("%s through a follower: %d %s; want %d", tc.name, fa.code, fa.body, tc.code)
		}
		sameAnswer(t, tc.name, fa, la, true)
		if agent.FramedForwards(f.Server) != before+1 {
			t.Fatalf("%s: the follower answered itself instead of the leader", tc.name)
		}
	}
}
