package agent

import (
	"fmt"
	"sort"
	"strings"

	version "github.com/hashicorp/go-version"
	"github.com/hashicorp/raft"
	"github.com/hashicorp/serf/serf"

	"github.com/nops-dev/nops/structs"
)

// Rolling upgrades, as Nomad's ServersMeetMinimumVersion: a message type
// added in a version is proposed only once every server of the cluster
// runs that version or a later one, so that no server meets an entry its
// FSM cannot apply. Each server advertises its version in the serf tag
// "version"; a new message type that an older server may safely skip is
// sent with structs.IgnoreUnknownTypeFlag instead.

// minVersions maps each message type added after the first release to the
// first version whose servers apply it.
var minVersions = func() map[structs.MessageType]*version.Version {
	v020 := version.Must(version.NewVersion("0.2.0"))
	m := map[structs.MessageType]*version.Version{}
	// 0.2.0 added ACLs, the notification outbox, autopilot, retention,
	// batch entries and webhook deliveries.
	for t := structs.ACLPolicyUpsertRequestType; t <= structs.WebhookDeliveryRequestType; t++ {
		m[t] = v020
	}
	// 0.2.0 also added many Nomad clusters and their promotion order.
	m[structs.DeploymentSkipRequirementsRequestType] = v020
	return m
}()

// approvalRulesVersion is the first version whose FSM applies the
// approval rules (SPEC section 20). They travel in message types older
// than them: a deployment that needs more than one approval or has a TTL,
// an approval under forbid_self, and an expiry. An older FSM would take a
// first approval for the last and refuse an expiry, and its state would
// part from the others'; so these requests wait for every server too.
func approvalRulesVersion() *version.Version { return version.Must(version.NewVersion("0.2.0")) }

// requestMinVersion returns the version a request needs of every server
// beyond its message type's, or nil.
func requestMinVersion(req any) *version.Version {
	switch r := req.(type) {
	case *structs.DeploymentCreateRequest:
		if d := r.Deployment; d != nil && (d.ApprovalsRequired > 1 || d.ApprovalTTL > 0) {
			return approvalRulesVersion()
		}
	case *structs.DeploymentDecisionRequest:
		if r.ForbidSelf {
			return approvalRulesVersion()
		}
	case *structs.DeploymentTransitionRequest:
		if r.To == structs.StateExpired {
			return approvalRulesVersion()
		}
	}
	return nil
}

// ServersTooOldError is a write refused because some servers run a version
// older than the one that introduced its message type.
type ServersTooOldError struct {
	Type    structs.MessageType
	Minimum string
	// Servers names each server that is too old, with its version.
	Servers []string
}

func (e *ServersTooOldError) Error() string {
	return fmt.Sprintf("%s needs every server at version %s or later; upgrade first: %s",
		e.Type, e.Minimum, strings.Join(e.Servers, ", "))
}

// Unwrap makes the error a conflict (409): the cluster is in a state that
// refuses the write until it changes.
func (e *ServersTooOldError) Unwrap() error { return structs.ErrConflict }

// checkMinimumVersion refuses a message type, or a request of it, that
// some server of the cluster, alive or failed (a failed server may come
// back), is too old to apply. A server whose version does not parse
// counts as too old.
func checkMinimumVersion(t structs.MessageType, req any, g *serf.Serf, region string) error {
	min, ok := minVersions[t&^structs.IgnoreUnknownTypeFlag]
	if v := requestMinVersion(req); v != nil && (!ok || v.GreaterThan(min)) {
		min, ok = v, true
	}
	if !ok || g == nil {
		return nil
	}
	return serversMeetMinimumVersion(t, min, g.Members(), region)
}

func serversMeetMinimumVersion(t structs.MessageType, min *version.Version, members []serf.Member, region string) error {
	var old []string
	for _, m := range members {
		si, ok := parseMember(m)
		if !ok || si.Region != region || (si.Status != serf.StatusAlive && si.Status != serf.StatusFailed) {
			continue
		}
		v, err := version.NewVersion(m.Tags[structs.MemberTagVersion])
		if err != nil || v.Core().LessThan(min.Core()) {
			old = append(old, fmt.Sprintf("%s (%s)", si.Name, m.Tags[structs.MemberTagVersion]))
		}
	}
	if len(old) == 0 {
		return nil
	}
	sort.Strings(old)
	return &ServersTooOldError{Type: t, Minimum: min.String(), Servers: old}
}

// canBatch reports whether the proposer may pack writes into batch
// entries: every server of the region, alive or failed (a failed server
// may come back), says it applies them (structs.MemberTagBatch, which only builds that
// apply them set), and so does every server of the Raft configuration,
// which gossip may not have found yet (just after a restart) or may have
// forgotten (a failed server reaped). A server that does not say so would
// refuse a batch entry that the others apply, and its state would part
// from theirs; so until gossip runs, and while one such server is a member,
// each write goes as an entry of its own. It runs once per group of writes:
// a copy of the members and of the configuration, no version parsing.
func canBatch(g *serf.Serf, r *raft.Raft, region string) bool {
	if g == nil || r == nil {
		return false
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return false
	}
	members := g.Members()
	return allServersTagged(members, region, structs.MemberTagBatch) && raftServersTagged(f.Configuration(), members, structs.MemberTagBatch)
}

// raftServersTagged reports whether every server of a Raft configuration
// is a gossip member that carries tag with the value "1".
func raftServersTagged(cfg raft.Configuration, members []serf.Member, tag string) bool {
	tagged := map[string]bool{}
	for _, m := range members {
		if si, ok := parseMember(m); ok && m.Tags[tag] == "1" {
			tagged[si.ID] = true
		}
	}
	for _, srv := range cfg.Servers {
		if !tagged[string(srv.ID)] {
			return false
		}
	}
	return true
}

// allServersTagged reports whether every server of the region, alive or
// failed, carries tag with the value "1".
func allServersTagged(members []serf.Member, region, tag string) bool {
	for _, m := range members {
		si, ok := parseMember(m)
		if !ok || si.Region != region || (si.Status != serf.StatusAlive && si.Status != serf.StatusFailed) {
			continue
		}
		if m.Tags[tag] != "1" {
			return false
		}
	}
	return true
}
