package reconcile

import (
	"sort"
	"testing"

	"github.com/nops-dev/nops/reconcile/nomadx"
)

// TestAllocBook: the book keeps the newest state of an allocation whatever
// the order it hears of it in, forgets one Nomad stopped or replaced, and
// a list replaces what it covers but keeps what an event told after it;
// only a listed namespace counts as covered.
func TestAllocBook(t *testing.T) {
	alloc := func(id, ns string, modify uint64, client string) nomadx.AllocState {
		return nomadx.AllocState{ID: id, Namespace: ns, JobID: "web", DesiredStatus: "run", ClientStatus: client, ModifyIndex: modify}
	}
	ids := func(b *allocBook) []string {
		var out []string
		for id, a := range b.allocs {
			out = append(out, id+"="+a.ClientStatus)
		}
		sort.Strings(out)
		return out
	}
	var b allocBook
	b.put(alloc("a", "default", 5, "running"))
	b.put(alloc("a", "default", 4, "pending")) // older: ignored
	stopped := alloc("b", "default", 6, "running")
	b.put(stopped)
	stopped.DesiredStatus, stopped.ModifyIndex = "stop", 7
	b.put(stopped) // stopped: forgotten
	replaced := alloc("c", "default", 8, "failed")
	replaced.NextAllocation = "d"
	b.put(replaced) // replaced: never kept
	if got := ids(&b); len(got) != 1 || got[0] != "a=running" {
		t.Fatalf("book %v; want a=running", got)
	}
	if b.covers("default") {
		t.Fatal("a namespace never listed is covered")
	}

	// An event after the list's index (e, 12) stays; an allocation the
	// list no longer has (a, at 5) goes; another namespace's stays.
	b.put(alloc("e", "default", 12, "pending"))
	b.put(alloc("x", "prod", 3, "running"))
	b.fill("default", []nomadx.AllocState{alloc("f", "default", 9, "running"), alloc("g", "other", 9, "running")}, 10,
		func(key string) bool { return key != "other/web" })
	want := []string{"e=pending", "f=running", "x=running"}
	if got := ids(&b); len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("book after the list %v; want %v", got, want)
	}
	if !b.covers("default") || b.covers("prod") || b.listed["default"] != 10 {
		t.Fatalf("covered: default %v, prod %v, index %d", b.covers("default"), b.covers("prod"), b.listed["default"])
	}
	b.fill("*", nil, 20, func(string) bool { return true })
	if got := ids(&b); len(got) != 0 || !b.covers("prod") {
		t.Fatalf("book after an empty list of every namespace: %v, prod covered %v", got, b.covers("prod"))
	}
}
