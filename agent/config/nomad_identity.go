package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// How Nops authenticates to Nomad.
//
//   - A static token: nomad_token (NOPS_NOMAD_TOKEN, NOMAD_TOKEN, or the
//     -nomad-token flag, which is warned about: every user of the machine
//     can read a command line in the process list).
//   - A token file: nomad_token_file, read at start and again whenever it
//     changes or Nomad answers 401 or 403, so a rotated token is picked up
//     without a restart.
//   - The Task API: with nomad_task_api, Nops runs as a Nomad task and talks
//     to its local agent through $NOMAD_SECRETS_DIR/api.sock with the task's
//     workload identity, read from $NOMAD_SECRETS_DIR/nomad_token (identity
//     file = true) or, failing that, NOMAD_TOKEN (identity env = true).

// envNomadSecretsDir is set by Nomad in every task's environment.
const envNomadSecretsDir = "NOMAD_SECRETS_DIR"

// Files Nomad puts in a task's secrets directory.
const (
	taskAPISocket   = "api.sock"
	taskIdentityJWT = "nomad_token"
)

// resolveNomadIdentity checks the Nomad identity settings together and
// fills in what the Task API implies.
func (l *loader) resolveNomadIdentity() {
	c := l.cfg
	if origin, ok := l.origin["nomad-token"]; ok && strings.HasPrefix(origin, "flag ") && c.NomadToken != "" {
		c.Warnings = append(c.Warnings, "the Nomad token is given with -nomad-token, where every user of this machine "+
			"can read it in the process list: use NOPS_NOMAD_TOKEN, NOMAD_TOKEN or -nomad-token-file instead")
	}
	_, tokenSet := l.origin["nomad-token"]
	if c.NomadTokenFile != "" && tokenSet && c.NomadToken != "" {
		l.bad["nomad-token-file"] = true
		l.errs = append(l.errs, keyErrorf("nomad-token-file", "set either nomad_token (%s) or nomad_token_file, not both",
			l.origin["nomad-token"]))
		return
	}
	if c.NomadTokenFile != "" {
		// NOMAD_TOKEN is only a default: the file wins over it.
		c.NomadToken = ""
	}
	if !c.NomadTaskAPI {
		return
	}
	secrets, _ := l.lookupEnv(envNomadSecretsDir)
	if secrets == "" {
		l.bad["nomad-task-api"] = true
		l.errs = append(l.errs, keyErrorf("nomad-task-api", "%s is not set: the Task API exists only inside a Nomad task", envNomadSecretsDir))
		return
	}
	if origin, ok := l.origin["nomad-addr"]; ok {
		l.bad["nomad-task-api"] = true
		l.errs = append(l.errs, keyErrorf("nomad-task-api", "the Task API replaces the Nomad address: remove nomad_addr (set by %s)", origin))
		return
	}
	c.NomadAddr = "unix://" + filepath.Join(secrets, taskAPISocket)
	if c.NomadTokenFile != "" || tokenSet {
		return
	}
	jwt := filepath.Join(secrets, taskIdentityJWT)
	if _, err := os.Stat(jwt); err == nil {
		c.NomadTokenFile = jwt
		c.NomadToken = ""
		return
	} else if !errors.Is(err, os.ErrNotExist) {
		l.errs = append(l.errs, keyErrorf("nomad-task-api", "read the workload identity: %w", err))
		return
	}
	if c.NomadToken == "" {
		l.bad["nomad-task-api"] = true
		l.errs = append(l.errs, keyErrorf("nomad-task-api", "the task has no workload identity: neither %s nor NOMAD_TOKEN exists "+
			"(give the task an identity block with file = true)", jwt))
	}
}
