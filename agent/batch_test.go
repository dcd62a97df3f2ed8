package agent_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// counter reads one of a server's counters.
func counter(t *testing.T, s *nopstest.Server, name string) float64 {
	t.Helper()
	v, err := testutil.MetricValue(s.Metrics(), name)
	if err != nil {
		t.Fatalf("server %s: %v", s.NodeID(), err)
	}
	return v
}

// TestCluster_ConcurrentWritesShareEntries sends writes at once to every
// server of a real cluster: the leader packs them into batch entries (it
// proposes more writes than Raft logs entries), each is answered on its
// own (of four approvals of one deployment, the FSM applies one and
// refuses the others, whichever entries they share), and every server ends
// with the same state.
func TestCluster_ConcurrentWritesShareEntries(t *testing.T) {
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers())
	c.WaitForPeers(30*time.Second, c.NodeIDs()...)
	leader := c.Leader()
	const deployments, writers, perWriter = 8, 32, 10
	for i := 1; i <= deployments; i++ {
		pendingDeployment(t, leader, deploymentID(i), fmt.Sprintf("job-%d", i))
	}
	// Every server counts the writes it proposed as leader, and the
	// entries of its own log: a change of leader during the test moves
	// the first, not the second.
	proposed := func() float64 {
		var n float64
		for _, s := range c.Servers() {
			n += counter(t, s, "nops_raft_proposed_writes_total")
		}
		return n
	}
	writes0 := proposed()
	entries0 := counter(t, leader, "nops_raft_log_store_entries_total")

	servers := c.Servers()
	var mu sync.Mutex
	approved := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, writers*(perWriter+1))
	for g := range writers {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			s := servers[g%len(servers)]
			for k := range perWriter {
				a, err := tryCall(s, "PUT", fmt.Sprintf("/v1/window/w-%02d-%02d", g, k),
					[]byte(`{"kind":"deny","schedule":"0 22 * * *","duration":"8h"}`))
				if err != nil || a.code != http.StatusOK {
					errs <- fmt.Errorf("window w-%02d-%02d through %s: %v %d %s", g, k, s.NodeID(), err, a.code, a.body)
				}
			}
			id := deploymentID(g%deployments + 1)
			a, err := tryCall(s, "POST", "/v1/deployment/"+id+"/approve", nil)
			switch {
			case err != nil:
				errs <- err
			case a.code == http.StatusOK:
				mu.Lock()
				approved[id]++
				mu.Unlock()
			case a.code == http.StatusConflict && strings.Contains(a.errorMessage(), "not pending approval"):
			default:
				errs <- fmt.Errorf("approve %s through %s: %d %s", id, s.NodeID(), a.code, a.body)
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := 1; i <= deployments; i++ {
		if n := approved[deploymentID(i)]; n != 1 {
			t.Errorf("deployment %d approved %d times, want once", i, n)
		}
	}
	writes := proposed() - writes0
	entries := counter(t, leader, "nops_raft_log_store_entries_total") - entries0
	if writes < writers*(perWriter+1) || entries >= writes {
		t.Fatalf("the leader proposed %v writes in %v log entries: want %d writes, in fewer entries", writes, entries, writers*(perWriter+1))
	}
	t.Logf("%v writes in %v log entries", writes, entries)

	// The leader's own writes (its marks) may go on: the states are
	// compared at one index.
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		index := leader.State().LatestIndex()
		want := stateDigest(t, leader.State())
		if n := strings.Count(want, `"name":"w-`); n != writers*perWriter {
			return false, fmt.Errorf("the leader holds %d windows, want %d", n, writers*perWriter)
		}
		for _, s := range c.Followers() {
			if got := s.State().LatestIndex(); got != index {
				return false, fmt.Errorf("server %s at index %d, the leader at %d", s.NodeID(), got, index)
			}
			if got := stateDigest(t, s.State()); got != want {
				return false, fmt.Errorf("server %s's state differs from the leader's at index %d", s.NodeID(), index)
			}
		}
		return leader.State().LatestIndex() == index, nil
	})
}
