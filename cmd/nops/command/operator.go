package command

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"

	"github.com/nops-dev/nops/agent/snapshot"
	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
)

// raftListPeersCommand lists the Raft peers.
type raftListPeersCommand struct {
	m *runner
}

func (c *raftListPeersCommand) Synopsis() string { return "List the Raft peers" }

func (c *raftListPeersCommand) Help() string {
	return `Usage: nops operator raft list-peers [options]

  Lists the servers of the Raft configuration: node name, Raft ID, address,
  whether each is the leader or a follower, whether it votes, and its Raft
  protocol version.
` + apiFlagsHelp
}

func (c *raftListPeersCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	return m.runAPI(c, args, apiArgs{name: "operator raft list-peers"}, func(api *client.Client, _ []string, asJSON bool) int {
		conf, _, err := api.Operator().RaftConfiguration(ctx, nil)
		if err != nil {
			return m.fail(err)
		}
		if asJSON {
			return m.printJSON(conf)
		}
		table[structs.RaftServer]{
			header: "Node\tID\tAddress\tState\tVoter\tRaftProtocol",
			row: func(s structs.RaftServer) string {
				state := "follower"
				if s.Leader {
					state = "leader"
				}
				return fmt.Sprintf("%s\t%s\t%s\t%s\t%t\t%s", s.Node, s.ID, s.Address, state, s.Voter, s.RaftProtocol)
			},
		}.print(m, conf.Servers)
		return exitOK
	})
}

// raftRemovePeerCommand removes a server from the Raft configuration.
type raftRemovePeerCommand struct {
	m *runner
}

func (c *raftRemovePeerCommand) Synopsis() string { return "Remove a server from the Raft peers" }

func (c *raftRemovePeerCommand) Help() string {
	return `Usage: nops operator raft remove-peer -peer-id=<id> [options]

  Removes a server from the Raft configuration, for a server that failed
  and will not come back. A server that left gracefully is removed by the
  leader on its own.

Options:

  -peer-id=<id>
    The Raft ID of the server to remove (see list-peers). Required.
` + apiFlagsHelp
}

func (c *raftRemovePeerCommand) Run(ctx context.Context, args []string) int {
	var id string
	spec := apiArgs{
		name:  "operator raft remove-peer",
		flags: func(fs *flag.FlagSet) { fs.StringVar(&id, "peer-id", "", "") },
		check: func([]string) error {
			if id == "" {
				return errors.New("-peer-id is required")
			}
			return nil
		},
	}
	return c.m.runWrite(c, args, spec, func(api *client.Client, _ []string) (any, string, error) {
		if err := api.Operator().RaftRemovePeer(ctx, id); err != nil {
			return nil, "", fmt.Errorf("remove peer %s: %w", id, err)
		}
		return map[string]string{"removed": id}, fmt.Sprintf("Removed peer with ID %q", id), nil
	})
}

// raftTransferCommand hands the leadership over.
type raftTransferCommand struct {
	m *runner
}

func (c *raftTransferCommand) Synopsis() string {
	return "Hand the Raft leadership over to another server"
}

func (c *raftTransferCommand) Help() string {
	return `Usage: nops operator raft transfer-leadership [-peer-id=<id>] [options]

  Hands the leadership over to another voter: the one named by -peer-id, or
  any when none is given. The leader stops its loops before it steps down.

Options:

  -peer-id=<id>
    The Raft ID of the server to take over (see list-peers).
` + apiFlagsHelp
}

func (c *raftTransferCommand) Run(ctx context.Context, args []string) int {
	var id string
	spec := apiArgs{
		name:  "operator raft transfer-leadership",
		flags: func(fs *flag.FlagSet) { fs.StringVar(&id, "peer-id", "", "") },
	}
	return c.m.runWrite(c, args, spec, func(api *client.Client, _ []string) (any, string, error) {
		res, err := api.Operator().RaftTransferLeadership(ctx, id)
		if err != nil {
			return nil, "", fmt.Errorf("transfer leadership: %w", err)
		}
		return res, fmt.Sprintf("Leadership transferred: the leader is now %s (%s)", orDash(res.LeaderID), orDash(res.Leader)), nil
	})
}

// snapshotSaveCommand saves a snapshot of the cluster's state to a file.
type snapshotSaveCommand struct {
	m *runner
}

func (c *snapshotSaveCommand) Synopsis() string {
	return "Save a snapshot of the cluster's state to a file"
}

func (c *snapshotSaveCommand) Help() string {
	return `Usage: nops operator snapshot save [options] <file>

  Has the leader take a snapshot of the replicated state and writes it to
  file: a gzipped tar of the Raft snapshot and its SHA-256 sums. The file
  is verified before it replaces anything at that path.
` + apiFlagsHelp
}

func (c *snapshotSaveCommand) Run(ctx context.Context, args []string) int {
	spec := apiArgs{name: "operator snapshot save", min: 1, max: 1, desc: "a file to write"}
	return c.m.runWrite(c, args, spec, func(api *client.Client, pos []string) (any, string, error) {
		path := pos[0]
		body, _, err := api.Operator().SnapshotSave(ctx)
		if err != nil {
			return nil, "", fmt.Errorf("save snapshot: %w", err)
		}
		defer body.Close()
		arc, err := writeVerified(path, body)
		if err != nil {
			return nil, "", fmt.Errorf("save snapshot: %w", err)
		}
		out := map[string]any{"file": path, "index": arc.Meta.Index, "term": arc.Meta.Term, "size": arc.Size()}
		return out, fmt.Sprintf("Snapshot saved to %s: index %d, term %d, %d bytes of state", path, arc.Meta.Index, arc.Meta.Term, arc.Size()), nil
	})
}

// writeVerified copies r to a temporary file beside path, verifies it as a
// snapshot archive, and renames it to path.
func writeVerified(path string, r io.Reader) (*snapshot.Archive, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return nil, fmt.Errorf("create file: %w", err)
	}
	done := false
	defer func() {
		if !done {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, r); err != nil {
		return nil, fmt.Errorf("receive snapshot: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return nil, fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return nil, fmt.Errorf("read back %s: %w", tmp.Name(), err)
	}
	arc, err := snapshot.Read(tmp)
	if err != nil {
		return nil, fmt.Errorf("the snapshot received is not valid: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return nil, fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return nil, fmt.Errorf("rename to %s: %w", path, err)
	}
	done = true
	return arc, nil
}

// snapshotRestoreCommand restores the cluster's state from a file.
type snapshotRestoreCommand struct {
	m *runner
}

func (c *snapshotRestoreCommand) Synopsis() string {
	return "Restore the cluster's state from a snapshot file"
}

func (c *snapshotRestoreCommand) Help() string {
	return `Usage: nops operator snapshot restore [options] <file>

  Replaces the replicated state of the whole cluster with the snapshot in
  file (written by "nops operator snapshot save"). The file is verified
  before it is sent. Everything since the snapshot is lost.
` + apiFlagsHelp
}

func (c *snapshotRestoreCommand) Run(ctx context.Context, args []string) int {
	var raw []byte
	spec := apiArgs{
		name: "operator snapshot restore", min: 1, max: 1, desc: "a snapshot file",
		load: func(pos []string) (err error) {
			if raw, err = os.ReadFile(pos[0]); err != nil {
				return fmt.Errorf("read snapshot: %w", err)
			}
			if _, err := snapshot.Read(bytes.NewReader(raw)); err != nil {
				return fmt.Errorf("snapshot file %s: %w", pos[0], err)
			}
			return nil
		},
	}
	return c.m.runWrite(c, args, spec, func(api *client.Client, _ []string) (any, string, error) {
		res, err := api.Operator().SnapshotRestore(ctx, bytes.NewReader(raw))
		if err != nil {
			return nil, "", fmt.Errorf("restore snapshot: %w", err)
		}
		return res, fmt.Sprintf("Snapshot restored: index %d, term %d", res.RestoredIndex, res.Term), nil
	})
}

// snapshotInspectCommand describes a snapshot file, offline.
type snapshotInspectCommand struct {
	m *runner
}

func (c *snapshotInspectCommand) Synopsis() string { return "Describe a snapshot file (offline)" }

func (c *snapshotInspectCommand) Help() string {
	return `Usage: nops operator snapshot inspect [-json] <file>

  Verifies a snapshot file and prints its Raft index, term and size, and
  how many objects of each kind its state holds. It does not contact a
  server.

Options:

  -json
    Print the description as JSON.
`
}

// snapshotInfo is the description of a snapshot file.
type snapshotInfo struct {
	ID     string         `json:"id"`
	Index  uint64         `json:"index"`
	Term   uint64         `json:"term"`
	Size   int            `json:"size"`
	Counts map[string]int `json:"counts"`
}

func (c *snapshotInspectCommand) Run(_ context.Context, args []string) int {
	m := c.m
	fs := newFlagSet("operator snapshot inspect")
	asJSON := fs.Bool("json", false, "")
	pos, code, ok := m.parse(c, fs, args, 1, 1, "a snapshot file")
	if !ok {
		return code
	}
	file, err := os.Open(pos[0])
	if err != nil {
		return m.fail(fmt.Errorf("open snapshot: %w", err))
	}
	defer file.Close()
	arc, err := snapshot.Read(file)
	if err != nil {
		return m.fail(fmt.Errorf("snapshot file %s: %w", pos[0], err))
	}
	st, err := fsm.ReadOnly(arc.State())
	if err != nil {
		return m.fail(fmt.Errorf("snapshot file %s: read state: %w", pos[0], err))
	}
	counts, err := st.Counts()
	if err != nil {
		return m.fail(fmt.Errorf("snapshot file %s: %w", pos[0], err))
	}
	info := snapshotInfo{ID: arc.Meta.ID, Index: arc.Meta.Index, Term: arc.Meta.Term, Size: arc.Size(), Counts: counts}
	if *asJSON {
		return m.printJSON(info)
	}
	m.kv(
		"ID", info.ID,
		"Index", fmt.Sprint(info.Index),
		"Term", fmt.Sprint(info.Term),
		"Size", fmt.Sprintf("%d bytes", info.Size),
	)
	kinds := make([]string, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	fmt.Fprintln(m.stdout)
	table[string]{
		header: "Kind\tCount",
		row:    func(k string) string { return fmt.Sprintf("%s\t%d", k, counts[k]) },
	}.print(m, kinds)
	return exitOK
}
