package nomadx

import "errors"

var (
	// ErrJobNotFound is returned when Nomad has no job with the given
	// namespace and ID (or no dispatched child with the given token).
	ErrJobNotFound = errors.New("job not found")

	// ErrDeploymentNotFound is returned when Nomad has no deployment with the
	// given ID.
	ErrDeploymentNotFound = errors.New("deployment not found")

	// ErrIndexMismatch is returned by Register when the job's modify index is
	// not the one the caller enforced: the job was created, changed or removed
	// by someone else since it was read.
	ErrIndexMismatch = errors.New("job modify index does not match")
)

// enforceIndexErrPrefix starts Nomad's answer to a failed check-and-set
// register.
const enforceIndexErrPrefix = "Enforcing job modify index"
