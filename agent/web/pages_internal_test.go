package web

import (
	"sync"
	"testing"
)

// stubBackend is a Backend whose methods no test here calls: New needs
// one, and page parsing reads none.
type stubBackend struct{ Backend }

// TestPages_ParsedOnFirstUse: New checks every page but keeps none parsed;
// a page is parsed once, on its first use, and kept (concurrent first
// uses share one parse); an unknown page is an error.
func TestPages_ParsedOnFirstUse(t *testing.T) {
	u, err := New(Config{Backend: stubBackend{}})
	if err != nil {
		t.Fatal(err)
	}
	if len(u.pages) < 10 || parsed(u) != 0 {
		t.Fatalf("after New: %d pages known, %d parsed; want every page known and none parsed", len(u.pages), parsed(u))
	}
	got := make([]any, 8)
	var wg sync.WaitGroup
	for i := range got {
		wg.Go(func() {
			p, err := u.page("events")
			if err != nil {
				t.Error(err)
			}
			got[i] = p
		})
	}
	wg.Wait()
	for _, p := range got {
		if p == nil || p != got[0] {
			t.Fatalf("first uses got different templates: %v", got)
		}
	}
	if parsed(u) != 1 || u.pages["events"].t == nil {
		t.Errorf("%d pages parsed after one page's use, want events alone", parsed(u))
	}
	if p, err := u.page("../layout"); err == nil || p != nil {
		t.Errorf("unknown page: %v, %v; want an error", p, err)
	}
}

// parsed counts the pages parsed (read once no render runs).
func parsed(u *UI) int {
	n := 0
	for _, p := range u.pages {
		if p.t != nil {
			n++
		}
	}
	return n
}
