package command

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestCLI_ServerMembers: nops server members lists the server itself, and
// a member that claims its node ID under another name with the reason it
// is refused, in the table and in JSON.
func TestCLI_ServerMembers(t *testing.T) {
	s := nopstest.StartDev(t)
	nopstest.FakeMember(t, s, "impostor", nopstest.MemberTags(s.NodeID(), s.RPCAddr(), "global"))
	c := newCLI(t, s)

	res := c.run("server", "members")
	if res.code != exitOK {
		t.Fatalf("server members: %d %s", res.code, res.stderr)
	}
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "Name") {
		t.Fatalf("server members: want a header and two rows:\n%s", res.stdout)
	}
	var self, impostor string
	for _, l := range lines[1:] {
		switch strings.Fields(l)[0] {
		case s.Config().NodeName:
			self = l
		case "impostor":
			impostor = l
		}
	}
	if self == "" || !strings.HasSuffix(strings.TrimSpace(self), "-") || !strings.Contains(self, "alive") {
		t.Fatalf("the server's own row is missing or refused:\n%s", res.stdout)
	}
	if !strings.Contains(impostor, "claims the node ID "+s.NodeID()) {
		t.Fatalf("the impostor's row does not say why it is refused:\n%s", res.stdout)
	}

	res = c.run("server", "members", "-json")
	var members []structs.Member
	if res.code != exitOK || json.Unmarshal([]byte(res.stdout), &members) != nil || len(members) != 2 {
		t.Fatalf("server members -json: %d %s %s", res.code, res.stdout, res.stderr)
	}
	for _, m := range members {
		if (m.Name == "impostor") != (m.Refused != "") {
			t.Fatalf("member %s refused %q", m.Name, m.Refused)
		}
	}
}
