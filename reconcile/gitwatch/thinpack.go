package gitwatch

import (
	"slices"

	"github.com/go-git/go-git/v5/plumbing/protocol/packp/capability"
	"github.com/go-git/go-git/v5/plumbing/transport"
)

// go-git's clients take out of every capability list a server advertises
// the ones listed in transport.UnsupportedCapabilities, thin-pack among
// them. Without thin-pack, a git server answers a fetch into an existing
// clone with every object of the new commit's tree, not only the new ones:
// its object walk leaves out the objects of the commits the client has only
// to find bases for thin deltas (git's --objects-edge). A commit that
// changes one of 10,000 job files then brings 10,003 objects (6 MB, about
// 100 ms of the server's and go-git's time) where git itself gets four.
//
// go-git's pack parser resolves a thin pack's outside bases from the
// storage it writes into, which for a fetch into a clone (fetchInto,
// history.go) is the clone, holding the objects of the commits it
// announced; a clone announces none, so its pack is whole. A thin pack
// whose base is missing fails the fetch, and the watcher clones again.
//
// The list is go-git's, read by every client of the process: it is set
// here, once, before any goroutine of this package can fetch, and never
// again.
func init() {
	transport.UnsupportedCapabilities = slices.DeleteFunc(slices.Clone(transport.UnsupportedCapabilities),
		func(c capability.Capability) bool { return c == capability.ThinPack })
}
