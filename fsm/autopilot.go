package fsm

import (
	"fmt"

	"github.com/nops-dev/nops/structs"
)

// TableAutopilot holds the autopilot configuration an operator set, in one
// row.
const TableAutopilot = "autopilot"

const autopilotKey = "autopilot"

// autopilotRow is the one row of TableAutopilot.
type autopilotRow struct {
	Key    string
	Config *structs.AutopilotConfig
}

// autopilotSetConfig replaces the autopilot configuration; with CAS, only
// when the stored one is at the index the request names.
func (w *writer) autopilotSetConfig(req *structs.AutopilotSetConfigRequest) error {
	if problems := req.Config.Validate(); len(problems) > 0 {
		return invalid("autopilot configuration: %v", problems)
	}
	raw, err := w.first(TableAutopilot, autopilotKey)
	if err != nil {
		return fmt.Errorf("autopilot lookup: %w", err)
	}
	c := req.Config
	var current uint64
	if raw != nil {
		old := raw.(*autopilotRow).Config
		current = old.ModifyIndex
		c.CreateIndex = old.CreateIndex
	} else {
		c.CreateIndex = w.index
	}
	if req.CAS && req.Config.ModifyIndex != current {
		return conflict("autopilot configuration is at index %d, not %d", current, req.Config.ModifyIndex)
	}
	c.ModifyIndex = w.index
	if err := w.put(TableAutopilot, &autopilotRow{Key: autopilotKey, Config: &c}); err != nil {
		return err
	}
	return w.event(req.WriteMeta, structs.Event{
		Kind: structs.EventKindOperator, Object: "autopilot", To: "configured",
		Message: fmt.Sprintf("autopilot: cleanup_dead_servers=%t last_contact_threshold=%s max_trailing_logs=%d min_quorum=%d server_stabilization_time=%s",
			c.CleanupDeadServers, c.LastContactThreshold, c.MaxTrailingLogs, c.MinQuorum, c.ServerStabilizationTime),
	})
}

// AutopilotConfig returns the autopilot configuration an operator set, or
// nil when none was.
func (s *StateStore) AutopilotConfig() (*structs.AutopilotConfig, error) {
	raw, err := s.db.Txn(false).First(TableAutopilot, "id", autopilotKey)
	if err != nil {
		return nil, fmt.Errorf("autopilot lookup: %w", err)
	}
	if raw == nil {
		return nil, nil
	}
	c := *raw.(*autopilotRow).Config
	return &c, nil
}
