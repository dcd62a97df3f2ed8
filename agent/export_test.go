package agent_test

import "github.com/nops-dev/nops/fsm"

func fsmAll() fsm.EventFilter { return fsm.EventFilter{} }
