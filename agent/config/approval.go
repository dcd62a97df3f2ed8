package config

import (
	"time"

	"github.com/hashicorp/hcl/v2"
)

// blockApproval is the approval block: the server's approval rules (SPEC
// section 20).
const blockApproval = "approval"

// ApprovalConfig holds the approval rules a job cannot set itself.
type ApprovalConfig struct {
	// ForbidSelf refuses (403) an approval by an identity whose name or
	// email is the commit's author's or committer's. It needs ACLs: only
	// they say who the approver is.
	ForbidSelf bool
	// TTL is how long a deployment may wait for approval before it
	// expires, for jobs that set no nops_approval_ttl; 0 (no ttl set)
	// never expires.
	TTL time.Duration
}

func approvalFields(a *ApprovalConfig) []attrField {
	return []attrField{
		{name: "forbid_self", v: boolValue(&a.ForbidSelf)},
		{name: "ttl", v: durationValue(&a.TTL)},
	}
}

// decodeApproval applies an approval block.
func (l *loader) decodeApproval(b *hcl.Block) {
	l.decodeBody(b.Body, approvalFields(&l.cfg.Approval), nil)
}

// validate checks the approval block: forbid_self, which only an ACL
// identity can answer, is not set with ACLs off, where every approver is
// whoever the request says it is. (A ttl that is not a positive duration
// is refused as it is read.)
func (a ApprovalConfig) validate(acls bool, add func(key, format string, args ...any)) {
	if a.ForbidSelf && !acls {
		add(blockApproval, "forbid_self: needs acl { enabled = true }: with ACLs off the approver is whoever the request "+
			"says it is, so a commit's author cannot be told from another approver; enable ACLs or remove forbid_self")
	}
}
