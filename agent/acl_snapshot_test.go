package agent_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nops-dev/nops/agent/config"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestACL_SnapshotNeedsACLAndIsRefusedBeforeTheUpload: a snapshot holds
// the ACL tables and restoring one replaces them, so an operator token
// without the acl capability can neither save nor restore one; and a
// follower refuses a restore without the right before it reads the
// upload (it would otherwise buffer up to snapshot_max_size for anyone).
func TestACL_SnapshotNeedsACLAndIsRefusedBeforeTheUpload(t *testing.T) {
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers(),
		nopstest.WithConfig(func(cfg *config.Config) { cfg.ACL.Enabled = true }))
	c.WaitForLeader(30 * time.Second)
	follower := c.Followers()[0]
	var boot structs.ACLTokenView
	aclCall(t, follower, "", "POST", "/v1/acl/bootstrap", nil).ok(t, "bootstrap", &boot)
	aclCall(t, follower, boot.SecretID, "PUT", "/v1/acl/policy/ops", map[string]string{
		"rules": "cluster {\n capabilities = [\"read\", \"operator\"]\n}"}).ok(t, "policy", nil)
	var ops structs.ACLTokenView
	aclCall(t, follower, boot.SecretID, "POST", "/v1/acl/token", map[string]any{"name": "ops", "policies": []string{"ops"}}).ok(t, "token", &ops)
	syncAll(t, c)

	if a := aclCall(t, follower, ops.SecretID, "GET", "/v1/operator/snapshot", nil); a.code != http.StatusForbidden {
		t.Fatalf("snapshot save with an operator token: %d %s; want 403", a.code, a.body)
	}
	if a := aclCall(t, follower, boot.SecretID, "GET", "/v1/operator/snapshot", nil); a.code != http.StatusOK {
		t.Fatalf("snapshot save with the management token: %d %s; want 200", a.code, a.body)
	}

	// A restore that announces 100 MiB and sends 512 KiB: the follower
	// answers without waiting for the rest (Go's server reads and
	// discards at most 256 KiB of an unread body before it answers).
	for name, token := range map[string]string{"no token": "", "operator token": ops.SecretID} {
		conn, err := net.Dial("tcp", follower.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "PUT /v1/operator/snapshot HTTP/1.1\r\nHost: %s\r\nContent-Type: application/x-nops-snapshot\r\nContent-Length: %d\r\n", follower.HTTPAddr(), 100<<20)
		if token != "" {
			fmt.Fprintf(conn, "X-Nops-Token: %s\r\n", token)
		}
		fmt.Fprintf(conn, "\r\n%s", strings.Repeat("x", 512<<10))
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			conn.Close()
			t.Fatalf("%s: no answer before the upload ended: %v", name, err)
		}
		resp.Body.Close()
		conn.Close()
		if resp.StatusCode != http.StatusUnauthorized && resp.StatusCode != http.StatusForbidden {
			t.Fatalf("%s: restore answered %d; want 401 or 403", name, resp.StatusCode)
		}
	}
}

// TestACL_EventStreamEndsWhenItsTokenIsDeleted: a stream checks its token
// again before each batch, so a deleted token stops receiving the audit log.
func TestACL_EventStreamEndsWhenItsTokenIsDeleted(t *testing.T) {
	s, mgmt := startSSO(t)
	var tok structs.ACLTokenView
	aclCall(t, s, mgmt, "POST", "/v1/acl/token", map[string]any{"name": "watcher", "policies": []string{"reader"}}).ok(t, "token", &tok)

	req, err := http.NewRequest(http.MethodGet, s.URL+"/v1/events/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Nops-Token", tok.SecretID)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	ended := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, resp.Body)
		close(ended)
	}()
	select {
	case <-ended:
		t.Fatal("the stream ended while its token was valid")
	case <-time.After(500 * time.Millisecond):
	}
	aclCall(t, s, mgmt, "DELETE", "/v1/acl/token/"+tok.AccessorID, nil).ok(t, "delete token", nil)
	select {
	case <-ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the stream of a deleted token still runs")
	}
}
