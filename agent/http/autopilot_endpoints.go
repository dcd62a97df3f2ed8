package agenthttp

import (
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/nops-dev/nops/structs"
)

func autopilotView(c *structs.AutopilotConfig) *structs.AutopilotConfiguration {
	return &structs.AutopilotConfiguration{
		CleanupDeadServers: c.CleanupDeadServers, LastContactThreshold: c.LastContactThreshold.String(),
		MaxTrailingLogs: c.MaxTrailingLogs, MinQuorum: c.MinQuorum,
		ServerStabilizationTime: c.ServerStabilizationTime.String(),
		CreateIndex:             c.CreateIndex, ModifyIndex: c.ModifyIndex,
	}
}

func (a *operatorAPI) autopilotGetConfig(_ http.ResponseWriter, _ *http.Request) (any, error) {
	return autopilotView(a.s.AutopilotConfig()), nil
}

// autopilotSetConfig replaces the autopilot configuration. With ?cas=N it
// applies only if the stored configuration is at index N (0: none set).
func (a *operatorAPI) autopilotSetConfig(_ http.ResponseWriter, r *http.Request) (any, error) {
	var body structs.AutopilotConfiguration
	if err := decode(r, &body); err != nil {
		return nil, err
	}
	var problems []string
	conf := structs.AutopilotConfig{CleanupDeadServers: body.CleanupDeadServers, MaxTrailingLogs: body.MaxTrailingLogs, MinQuorum: body.MinQuorum}
	for _, d := range []struct {
		name string
		in   string
		out  *time.Duration
	}{
		{"last_contact_threshold", body.LastContactThreshold, &conf.LastContactThreshold},
		{"server_stabilization_time", body.ServerStabilizationTime, &conf.ServerStabilizationTime},
	} {
		v, err := time.ParseDuration(d.in)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %q is not a duration such as 200ms or 10s", d.name, d.in))
			continue
		}
		*d.out = v
	}
	req := &structs.AutopilotSetConfigRequest{WriteMeta: writeMeta(r)}
	if v := r.URL.Query().Get("cas"); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			problems = append(problems, fmt.Sprintf("cas: %q is not an index", v))
		}
		req.CAS, conf.ModifyIndex = true, n
	}
	if len(problems) == 0 {
		problems = conf.Validate()
	}
	if len(problems) > 0 {
		return nil, badRequest(problems...)
	}
	req.Config = conf
	if _, err := a.s.Apply(structs.AutopilotSetConfigRequestType, req); err != nil {
		return nil, err
	}
	return autopilotView(a.s.AutopilotConfig()), nil
}

// autopilotHealth answers from the leader, where autopilot runs (a
// kindLeaderRead route: a follower forwards it there).
func (a *operatorAPI) autopilotHealth(w http.ResponseWriter, _ *http.Request) (any, error) {
	st := a.s.AutopilotState()
	if st == nil || len(st.Servers) == 0 {
		return nil, &HTTPError{Code: http.StatusServiceUnavailable, Msg: "autopilot has not gathered the servers' health yet; retry in a few seconds"}
	}
	out := &structs.AutopilotHealth{Healthy: st.Healthy, FailureTolerance: st.FailureTolerance, Leader: string(st.Leader),
		Voters: []string{}, Servers: []structs.AutopilotServerHealth{}}
	for _, id := range st.Voters {
		out.Voters = append(out.Voters, string(id))
	}
	for id, srv := range st.Servers {
		contact := srv.Stats.LastContact.String()
		if srv.Stats.LastContact < 0 {
			contact = "never"
		}
		out.Servers = append(out.Servers, structs.AutopilotServerHealth{
			ID: string(id), Name: srv.Server.Name, Address: string(srv.Server.Address),
			SerfStatus: string(srv.Server.NodeStatus), Version: srv.Server.Version,
			Leader: srv.State == "leader", Voter: srv.HasVotingRights(), RaftState: string(srv.State),
			Healthy: srv.Health.Healthy, LastContact: contact, LastTerm: srv.Stats.LastTerm,
			LastIndex: srv.Stats.LastIndex, StableSince: srv.Health.StableSince.UTC(),
		})
	}
	sort.Slice(out.Servers, func(i, j int) bool { return out.Servers[i].Name < out.Servers[j].Name })
	if !out.Healthy {
		w.Header().Set("X-Nops-Autopilot-Healthy", "false")
	}
	return out, nil
}

// agentRaftStats is a server's own Raft index, term and last contact, for
// the leader's autopilot.
func (a *clusterAPI) agentRaftStats(_ http.ResponseWriter, _ *http.Request) (any, error) {
	return a.s.RaftStats(), nil
}

// operatorGC forces a retention pass.
func (a *operatorAPI) operatorGC(_ http.ResponseWriter, r *http.Request) (any, error) {
	res, err := a.s.GC(r.Context(), writeMeta(r).Actor)
	if err != nil {
		return nil, err
	}
	return &res, nil
}
