package reconcile

// HoldPreview marks a preview as running on m, as a long one would, and
// returns the function that ends it: the tests of the one-at-a-time bound
// use it to hold the bound without racing a real preview.
func (m *Manager) HoldPreview() (release func(), ok bool) {
	if !m.preview.busy.CompareAndSwap(false, true) {
		return func() {}, false
	}
	return func() { m.preview.busy.Store(false) }, true
}
