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
	if len(u.pageFiles) < 10 || len(u.pages) != 0 {
		t.Fatalf("after New: %d pages known, %d parsed; want every page known and none parsed", len(u.pageFiles), len(u.pages))
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
	if len(u.pages) != 1 || u.pages["events"] == nil {
		t.Errorf("parsed after one page's use: %v", u.pages)
	}
	if p, err := u.page("../layout"); err == nil || p != nil {
		t.Errorf("unknown page: %v, %v; want an error", p, err)
	}
}
