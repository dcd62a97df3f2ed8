package reconcile

import (
	"reflect"
	"testing"

	"github.com/nops-dev/nops/structs"
)

// TestKickQueue: kicks wait in order until taken, one that wakes
// everything replaces them, and too many collapse into one that does.
func TestKickQueue(t *testing.T) {
	q := NewKickQueue()
	if got := q.Take(); len(got) != 0 {
		t.Fatalf("an empty queue gave %+v", got)
	}
	a, b := structs.Kick{Deployment: "a"}, structs.Kick{Namespace: "default", JobID: "web"}
	q.Push(a)
	q.Push(b)
	select {
	case <-q.Ready():
	default:
		t.Fatalf("Ready not signalled after a push")
	}
	if got := q.Take(); !reflect.DeepEqual(got, []structs.Kick{a, b}) {
		t.Fatalf("took %+v, want %+v", got, []structs.Kick{a, b})
	}

	q.Push(a)
	q.Push(structs.Kick{All: true})
	q.Push(b)
	if got := q.Take(); !reflect.DeepEqual(got, []structs.Kick{{All: true}}) {
		t.Fatalf("after a kick of everything took %+v", got)
	}

	for range maxPendingKicks + 1 {
		q.Push(a)
	}
	if got := q.Take(); !reflect.DeepEqual(got, []structs.Kick{{All: true}}) {
		t.Fatalf("after %d kicks took %d, want one of everything", maxPendingKicks+1, len(got))
	}
	if got := q.Take(); len(got) != 0 {
		t.Fatalf("a taken queue gave %+v", got)
	}
}
