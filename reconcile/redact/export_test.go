package redact

import "github.com/hashicorp/nomad/api"

// Diff returns a redacted deep copy of diff using DefaultKeys plus the extra
// fragments in keys. A nil diff gives nil. The input is never modified.
func Diff(diff *api.JobDiff, keys []string) *api.JobDiff {
	return New(keys...).Diff(diff)
}
