package agent

import (
	"errors"
	"fmt"
	"sync"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-msgpack/v2/codec"
	"github.com/hashicorp/raft"
)

// errRefusedAppend answers an AppendEntries that no leader sends.
var errRefusedAppend = errors.New("refused AppendEntries")

// guardedTransport is the Raft transport of the RPC port with a check in
// front of Raft: an AppendEntries that no leader sends is answered with an
// error and never reaches Raft.
//
// hashicorp/raft stores a request's new entries as they come and only
// checks the entry before them (PrevLogEntry, skipped when it is 0). An
// entry that does not follow it leaves a gap in the log, and the commit
// index that comes with it makes Raft apply across the gap and panic ("log
// not found"), at once and again at every start from that data dir. A
// configuration entry that does not decode panics the same way. A leader
// sends entries PrevLogEntry+1, PrevLogEntry+2, ... in order, so the check
// refuses only requests that are forged or corrupt.
//
// Every method but Consumer and Close is NetworkTransport's; heartbeats,
// which carry no entry, take Raft's fast path as before.
type guardedTransport struct {
	*raft.NetworkTransport
	logger    hclog.Logger
	consumeCh chan raft.RPC
	stop      chan struct{}
	closeOnce sync.Once
}

func newGuardedTransport(t *raft.NetworkTransport, logger hclog.Logger) *guardedTransport {
	g := &guardedTransport{
		NetworkTransport: t,
		logger:           logger,
		consumeCh:        make(chan raft.RPC),
		stop:             make(chan struct{}),
	}
	go g.run(t.Consumer())
	return g
}

// Consumer returns the RPCs that passed the check.
func (g *guardedTransport) Consumer() <-chan raft.RPC { return g.consumeCh }

// Close stops the check and closes the transport.
func (g *guardedTransport) Close() error {
	g.closeOnce.Do(func() { close(g.stop) })
	return g.NetworkTransport.Close()
}

// run hands every RPC that passes the check to Raft, and answers the
// others with their error.
func (g *guardedTransport) run(in <-chan raft.RPC) {
	for {
		select {
		case rpc := <-in:
			if err := checkRPC(rpc.Command); err != nil {
				g.logger.Error("refused a Raft RPC", "error", err)
				rpc.Respond(&raft.AppendEntriesResponse{}, err)
				continue
			}
			select {
			case g.consumeCh <- rpc:
			case <-g.stop:
				rpc.Respond(nil, raft.ErrTransportShutdown)
				return
			}
		case <-g.stop:
			return
		}
	}
}

// checkRPC returns an error wrapping errRefusedAppend for an AppendEntries
// whose entries do not follow its PrevLogEntry one index at a time, or
// that holds an entry Raft cannot take: nil, of a peer change of Raft
// protocols before 3, or a configuration that does not decode. Other RPCs
// pass.
func checkRPC(cmd any) error {
	a, ok := cmd.(*raft.AppendEntriesRequest)
	if !ok {
		return nil
	}
	from := string(a.Addr)
	for i, e := range a.Entries {
		want := a.PrevLogEntry + 1 + uint64(i)
		if e == nil {
			return fmt.Errorf("%w from %q: entry %d of the request is empty", errRefusedAppend, from, i)
		}
		if e.Index != want {
			return fmt.Errorf("%w from %q: entry at index %d where index %d follows the previous entry %d: a leader never sends a log with a gap",
				errRefusedAppend, from, e.Index, want, a.PrevLogEntry)
		}
		if err := checkEntry(e); err != nil {
			return fmt.Errorf("%w from %q: entry at index %d: %w", errRefusedAppend, from, e.Index, err)
		}
	}
	return nil
}

// checkEntry refuses the entries that make Raft panic as it stores them.
func checkEntry(e *raft.Log) error {
	switch e.Type {
	case raft.LogConfiguration:
		var c raft.Configuration
		if err := codec.NewDecoderBytes(e.Data, &codec.MsgpackHandle{}).Decode(&c); err != nil {
			return fmt.Errorf("configuration does not decode: %w", err)
		}
	case raft.LogAddPeerDeprecated, raft.LogRemovePeerDeprecated:
		return fmt.Errorf("peer change of a Raft protocol before 3 (type %s)", e.Type)
	}
	return nil
}
