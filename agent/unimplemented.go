package agent

import (
	"errors"
	"fmt"

	"github.com/nops-dev/nops/agent/config"
)

// checkImplemented refuses, at start, a setting that the configuration
// accepts but no part of the server acts on yet: a setting silently
// ignored would let an operator believe it works.
func checkImplemented(cfg *config.Config) error {
	var errs []error
	for _, n := range cfg.Notify {
		errs = append(errs, fmt.Errorf("notify %q: notify blocks are not implemented yet: remove the block (no notification would be sent)", n.Name))
	}
	return errors.Join(errs...)
}
