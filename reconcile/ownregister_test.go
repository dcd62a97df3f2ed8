package reconcile

import (
	"testing"
	"time"
)

// TestListPredates: a list of live jobs asked for before Nomad answered
// Nops's own register shows the job at an older index (or not at all) and
// is read as the answer's index; a list asked for after the answer, one
// that shows a newer index (someone else's change), or a job last seen by
// a plan rather than a register, is read as it is.
func TestListPredates(t *testing.T) {
	answered := time.Now()
	own := observed{liveMod: 20, inSync: true, registered: answered}
	before, after := answered.Add(-time.Millisecond), answered.Add(time.Millisecond)
	for _, tc := range []struct {
		name    string
		prev    observed
		liveMod uint64
		listed  time.Time
		want    bool
	}{
		{"list before the answer shows the old index", own, 12, before, true},
		{"list before the answer does not show a new job", own, 0, before, true},
		{"list before the answer shows the answer's index", own, 20, before, false},
		{"list before the answer shows a newer index", own, 25, before, false},
		{"list after the answer shows an older index", own, 12, after, false},
		{"no list time", own, 12, time.Time{}, false},
		{"seen by a plan, not a register", observed{liveMod: 20, inSync: true}, 12, before, false},
	} {
		if got := listPredates(tc.prev, tc.liveMod, tc.listed); got != tc.want {
			t.Errorf("%s: listPredates = %v, want %v", tc.name, got, tc.want)
		}
	}
}
