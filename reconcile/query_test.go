package reconcile

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/nops-dev/nops/fsm"
	"github.com/nops-dev/nops/structs"
)

// fsmServer is a Server over a bare FSM, for the reads of Query.
type fsmServer struct {
	f     *fsm.FSM
	index uint64
}

func (s *fsmServer) State() *fsm.StateStore { return s.f.State() }
func (s *fsmServer) IsLeader() bool         { return true }
func (s *fsmServer) NodeID() string         { return "node" }
func (s *fsmServer) Apply(t structs.MessageType, req any) (uint64, error) {
	raw, err := structs.Encode(t, req)
	if err != nil {
		return 0, err
	}
	s.index++
	if res := s.f.Apply(&raft.Log{Index: s.index, Term: 1, Type: raft.LogCommand, Data: raw}); res != nil {
		if err, ok := res.(error); ok {
			return 0, err
		}
	}
	return s.index, nil
}

// TestQueryJobCluster: a job named without a cluster is of the one
// cluster that holds it, ambiguous when several do; one that none holds is
// of the default cluster when one is configured, of the only cluster, and
// otherwise a request that must name its cluster, never of a cluster that
// is not configured.
func TestQueryJobCluster(t *testing.T) {
	f, err := fsm.New(hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	srv := &fsmServer{f: f}
	if _, err := srv.Apply(structs.JobStatusUpsertRequestType, &structs.JobStatusUpsertRequest{
		WriteMeta: structs.WriteMeta{Time: time.Now().UTC()},
		Statuses: []*structs.JobStatus{
			{Cluster: "eu", Namespace: "default", JobID: "web"},
			{Cluster: "us", Namespace: "default", JobID: "web"},
			{Cluster: "us", Namespace: "default", JobID: "api"},
		},
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		clusters      []string
		named, job    string
		want, wantErr string
	}{
		{clusters: []string{"eu", "us"}, named: "eu", job: "web", want: "eu"},
		{clusters: []string{"eu", "us"}, job: "api", want: "us"},
		{clusters: []string{"eu", "us"}, job: "web", wantErr: "is in clusters eu, us"},
		{clusters: []string{"eu", "us"}, job: "db", wantErr: "in none of the Nomad clusters (eu, us)"},
		{clusters: []string{"default", "us"}, job: "db", want: "default"},
		{clusters: []string{"eu"}, job: "db", want: "eu"},
		{job: "db", want: "default"},
	} {
		q := &Query{server: srv, clusters: c.clusters}
		got, err := q.JobCluster(c.named, "default", c.job)
		switch {
		case c.wantErr != "" && (err == nil || !errors.Is(err, structs.ErrInvalid) || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("clusters %v, job %s: %q, %v; want ErrInvalid saying %q", c.clusters, c.job, got, err, c.wantErr)
		case c.wantErr == "" && (err != nil || got != c.want):
			t.Errorf("clusters %v, job %s: %q, %v; want %q", c.clusters, c.job, got, err, c.want)
		}
	}
}
