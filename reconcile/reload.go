package reconcile

import (
	"errors"

	"github.com/nops-dev/nops/reconcile/gitwatch"
	"github.com/nops-dev/nops/structs/meta"
)

// ErrNoWatcher is a repository change asked of a manager built without a
// git watcher.
var ErrNoWatcher = errors.New("this server watches no git repositories")

// SetDefaults replaces the defaults of jobs that set no meta (policy,
// apply and hook timeouts), as a configuration reload does. They apply to
// the deployments detected from now on.
func (m *Manager) SetDefaults(d meta.Defaults) {
	m.defaults.Store(&d)
	m.TriggerDetection()
}

func (m *core) jobDefaults() meta.Defaults {
	if d := m.defaults.Load(); d != nil {
		return *d
	}
	return m.cfg.Defaults
}

// UpdateRepositories replaces the repositories watched, as a configuration
// reload does, and runs a detection cycle. An invalid set changes nothing.
func (m *Manager) UpdateRepositories(repos []gitwatch.RepoConfig) (added, changed, removed []string, err error) {
	if m.git == nil {
		return nil, nil, nil, ErrNoWatcher
	}
	added, changed, removed, err = m.git.Update(repos)
	if err != nil {
		return nil, nil, nil, err
	}
	m.TriggerDetection()
	return added, changed, removed, nil
}
