package command

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
)

// statusCommand shows the cluster at a glance.
type statusCommand struct {
	m *runner
}

func (c *statusCommand) Synopsis() string {
	return "Show the cluster, its jobs and deployments at a glance"
}

func (c *statusCommand) Help() string {
	return `Usage: nops status [options]

  Shows the leader, the server answering, the Raft peers, the managed jobs
  by sync state, the deployments by state and the last detection cycle.
  Parts that the server does not serve are shown as unavailable.
` + apiFlagsHelp
}

// statusOutput is the JSON form of nops status.
type statusOutput struct {
	Server             *structs.AgentSelf         `json:"server"`
	Raft               *structs.RaftConfiguration `json:"raft"`
	Index              uint64                     `json:"index"`
	JobsBySync         map[string]int             `json:"jobs_by_sync"`
	DeploymentsByState map[string]int             `json:"deployments_by_state"`
	LastDetection      *structs.DetectionCycle    `json:"last_detection"`
	Unavailable        []string                   `json:"unavailable,omitempty"`
}

func (c *statusCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	return m.runAPI(c, args, apiArgs{name: "status"}, func(api *client.Client, _ []string, asJSON bool) int {
		out, err := c.read(ctx, api)
		if err != nil {
			return m.fail(err)
		}
		if asJSON {
			return m.printJSON(out)
		}
		c.print(out)
		return exitOK
	})
}

// read gathers the status; a part the server does not serve is listed as
// unavailable.
func (c *statusCommand) read(ctx context.Context, api *client.Client) (*statusOutput, error) {
	out := &statusOutput{}
	self, meta, err := api.Agent().Self(ctx, nil)
	if err != nil {
		return nil, err
	}
	out.Server, out.Index = self, meta.LastIndex
	if out.Raft, _, err = api.Operator().RaftConfiguration(ctx, nil); err != nil {
		return nil, err
	}
	unavailable := func(what string, err error) bool {
		if client.IsNoSuchEndpoint(err) {
			out.Unavailable = append(out.Unavailable, what)
			return true
		}
		return false
	}
	if jobs, _, err := api.Jobs().List(ctx, nil); err == nil {
		out.JobsBySync = map[string]int{}
		for _, j := range jobs {
			out.JobsBySync[string(j.Sync)]++
		}
	} else if !unavailable("jobs", err) {
		return nil, err
	}
	deps, _, err := api.Deployments().List(ctx, client.DeploymentFilter{}, nil)
	if err != nil {
		return nil, err
	}
	out.DeploymentsByState = map[string]int{}
	for _, d := range deps {
		out.DeploymentsByState[string(d.State)]++
	}
	if cycle, _, err := api.Status().DetectionCycle(ctx, nil); err == nil {
		out.LastDetection = cycle
	} else if !unavailable("last detection", err) {
		return nil, err
	}
	return out, nil
}

func (c *statusCommand) print(out *statusOutput) {
	m := c.m
	self := out.Server
	leader := "none known"
	voters := 0
	for _, s := range out.Raft.Servers {
		if s.Leader {
			leader = fmt.Sprintf("%s (%s)", s.Address, s.Node)
		}
		if s.Voter {
			voters++
		}
	}
	role := self.RaftState
	if self.IsLeader {
		role = "leader"
		if !self.LoopsOn {
			role += ", loops not running"
		}
	}
	this := fmt.Sprintf("%s (%s), version %s", self.Name, strings.ToLower(role), self.Version)
	if self.Dev {
		this += ", dev mode"
	}
	pairs := []string{
		"Leader", leader,
		"This server", this,
		"HTTP address", self.HTTPAddr,
		"Raft peers", fmt.Sprintf("%d (%s)", len(out.Raft.Servers), plural(voters, "voter")),
		"State index", fmt.Sprint(out.Index),
		"Namespaces", strings.Join(self.Namespaces, ","),
	}
	if out.JobsBySync != nil {
		pairs = append(pairs, "Jobs", countSummary(out.JobsBySync,
			[]string{string(structs.SyncInSync), string(structs.SyncDrift), string(structs.SyncError)}))
	} else {
		pairs = append(pairs, "Jobs", "unavailable (this server does not serve /v1/jobs)")
	}
	var states []string
	for _, s := range structs.AllStates {
		states = append(states, string(s))
	}
	pairs = append(pairs, "Deployments", countSummary(out.DeploymentsByState, states))
	switch cy := out.LastDetection; {
	case cy != nil:
		pairs = append(pairs, "Last detection", fmt.Sprintf("%s by %s: %d jobs, %d drifted, %d deployments created",
			m.timeAgo(cy.FinishedAt), orDash(cy.Leader), cy.Jobs, cy.Drifted, cy.Created))
	case contains(out.Unavailable, "last detection"):
		pairs = append(pairs, "Last detection", "unavailable (this server does not serve it)")
	default:
		pairs = append(pairs, "Last detection", "none yet")
	}
	m.kv(pairs...)
}

// countSummary renders counts as "5: 2 in_sync, 3 drift", in the order of
// known and then any other keys, leaving out zeros.
func countSummary(counts map[string]int, order []string) string {
	total := 0
	for _, n := range counts {
		total += n
	}
	if total == 0 {
		return "0"
	}
	seen := map[string]bool{}
	var parts []string
	for _, k := range order {
		seen[k] = true
		if counts[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
		}
	}
	var other []string
	for k := range counts {
		if !seen[k] && counts[k] > 0 {
			other = append(other, k)
		}
	}
	sort.Strings(other)
	for _, k := range other {
		parts = append(parts, fmt.Sprintf("%d %s", counts[k], k))
	}
	return fmt.Sprintf("%d: %s", total, strings.Join(parts, ", "))
}

func contains(l []string, s string) bool {
	for _, v := range l {
		if v == s {
			return true
		}
	}
	return false
}

// plural renders "1 voter", "3 voters".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
