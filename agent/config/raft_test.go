package config

import (
	"strings"
	"testing"
	"time"
)

func TestRaftMultiplier_ScalesBaseTimings(t *testing.T) {
	c, err := Load(args(), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.RaftTimings(); got != (RaftTimings{300 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond}) {
		t.Fatalf("default timings = %+v", got)
	}
	p := writeFile(t, "raft.hcl", `raft_multiplier = 5`)
	c, err = Load(args("-config", p), env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.RaftTimings(); got != (RaftTimings{1500 * time.Millisecond, 1500 * time.Millisecond, 1500 * time.Millisecond}) {
		t.Fatalf("timings at 5 = %+v", got)
	}
	for _, bad := range []string{"0", "11", "-1", "fast"} {
		if _, err := Load(args("-raft-multiplier", bad), env(nil)); err == nil || !strings.Contains(err.Error(), "raft-multiplier") {
			t.Errorf("-raft-multiplier %s: error %v, want one naming raft-multiplier", bad, err)
		}
	}
}
