package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hashicorp/raft"

	"github.com/nops-dev/nops/fsm"
)

// peersFile is the manual recovery file of a cluster that lost its quorum:
// an operator writes it into <data-dir>/raft on every surviving server, and
// each server replaces its Raft configuration with it at start.
const peersFile = "peers.json"

// recoveryPeer is one server in peers.json.
type recoveryPeer struct {
	ID       string `json:"id"`
	Address  string `json:"address"`
	NonVoter bool   `json:"non_voter"`
}

// readPeersFile reads <raftDir>/peers.json, if present.
func readPeersFile(raftDir string) (*raft.Configuration, error) {
	path := filepath.Join(raftDir, peersFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	var peers []recoveryPeer
	if err := json.Unmarshal(b, &peers); err != nil {
		return nil, fmt.Errorf("%s is not a JSON list of {\"id\", \"address\", \"non_voter\"}: %w", path, err)
	}
	if len(peers) == 0 {
		return nil, fmt.Errorf("%s lists no server", path)
	}
	cfg := &raft.Configuration{}
	for i, p := range peers {
		if p.ID == "" || p.Address == "" {
			return nil, fmt.Errorf("%s: server %d needs an id and an address", path, i)
		}
		suffrage := raft.Voter
		if p.NonVoter {
			suffrage = raft.Nonvoter
		}
		cfg.Servers = append(cfg.Servers, raft.Server{ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.Address), Suffrage: suffrage})
	}
	seen := map[raft.ServerID]bool{}
	for _, srv := range cfg.Servers {
		if seen[srv.ID] {
			return nil, fmt.Errorf("%s: server ID %s is listed twice", path, srv.ID)
		}
		seen[srv.ID] = true
	}
	return cfg, nil
}

// recoverFromPeersFile applies peers.json, then renames it so that it is
// applied once.
func recoverFromPeersFile(s *Server, rc *raft.Config, raftDir string, logs raft.LogStore, stable raft.StableStore,
	snaps raft.SnapshotStore, trans raft.Transport) error {
	cfg, err := readPeersFile(raftDir)
	if err != nil || cfg == nil {
		return err
	}
	s.logger.Warn("recovering the Raft configuration from peers.json", "servers", len(cfg.Servers))
	f, err := newRecoveryFSM(s)
	if err != nil {
		return err
	}
	if err := raft.RecoverCluster(rc, f, logs, stable, snaps, trans, *cfg); err != nil {
		return fmt.Errorf("recover from %s: %w", peersFile, err)
	}
	done := filepath.Join(raftDir, "peers.info")
	if err := os.Rename(filepath.Join(raftDir, peersFile), done); err != nil {
		return fmt.Errorf("rename %s after recovery: %w", peersFile, err)
	}
	s.logger.Info("raft configuration recovered; peers.json renamed to peers.info")
	return nil
}

// newRecoveryFSM returns a throwaway FSM for RecoverCluster, which replays
// the log into it to build a snapshot.
func newRecoveryFSM(s *Server) (raft.FSM, error) {
	return fsm.New(s.logger.Named("recovery"))
}
