package testutil

import (
	"fmt"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"
)

// nomadACLConfig turns on Nomad's ACL system.
const nomadACLConfig = `
acl {
  enabled = true
}
`

// WithACL starts the agent with ACLs enabled and bootstrapped: the
// management token is in NomadAgent.ManagementToken, and NomadAgent.Client
// and the Wait helpers use it. Without it an agent runs with ACLs off, as
// before.
func WithACL() NomadOption {
	return func(o *nomadOptions) { o.acl = true }
}

// readyWithACL bootstraps the ACL system once the agent has a leader, then
// checks readiness with the management token.
func (a *NomadAgent) readyWithACL() (bool, error) {
	if a.ManagementToken == "" {
		if err := hasLeader(a.Client.Status().Leader); err != nil {
			return false, err
		}
		tok, _, err := a.Client.ACLTokens().Bootstrap(nil)
		if err != nil {
			return false, fmt.Errorf("bootstrapping ACLs: %w", err)
		}
		a.ManagementToken = tok.SecretID
		a.Client.SetSecretID(tok.SecretID)
	}
	return a.ready()
}

// ACLToken creates a policy named name with rules (HCL), and a client token
// that carries it, and returns the token's secret ID. jobScope, when set,
// makes the policy a job-scoped one, attached to every task of that job in
// the default namespace (its workload identities get it).
func (a *NomadAgent) ACLToken(t testing.TB, name, rules, jobScope string) string {
	t.Helper()
	a.ACLPolicy(t, name, rules, jobScope)
	tok, _, err := a.Client.ACLTokens().Create(&nomadapi.ACLToken{Name: name, Type: "client", Policies: []string{name}}, nil)
	if err != nil {
		t.Fatalf("testutil: creating ACL token %q: %v", name, err)
	}
	return tok.SecretID
}

// ACLPolicy creates or replaces a policy named name with rules (HCL).
// jobScope, when set, attaches it to the job of that ID in the default
// namespace, for the workload identities of its tasks.
func (a *NomadAgent) ACLPolicy(t testing.TB, name, rules, jobScope string) {
	t.Helper()
	p := &nomadapi.ACLPolicy{Name: name, Rules: rules}
	if jobScope != "" {
		p.JobACL = &nomadapi.JobACL{Namespace: "default", JobID: jobScope}
	}
	if _, err := a.Client.ACLPolicies().Upsert(p, nil); err != nil {
		t.Fatalf("testutil: writing ACL policy %q: %v", name, err)
	}
}
