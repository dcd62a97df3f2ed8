package nopstest

import "github.com/nops-dev/nops/structs"

// StateRank orders deployment states along the lifecycle, for tests that
// check that a deployment never goes back: the active states in the order
// of structs.AllStates (detected 0, pending_approval 1, pre_hook 2,
// applying 3, post_hook 4), then every terminal state (and any unknown
// one) at one rank after them. Every move structs.Transitions allows
// raises the rank.
func StateRank(s structs.DeploymentState) int {
	rank := 0
	for _, k := range structs.AllStates {
		if k.Terminal() {
			continue
		}
		if k == s {
			return rank
		}
		rank++
	}
	return rank
}
