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

	// ErrInvalidJob is matched by a Parse error that is Nomad's verdict on
	// the file itself (a syntax error, a missing variable, no job ID), as
	// opposed to a failure to get an answer: only such an error says
	// something lasting about the file.
	ErrInvalidJob = errors.New("invalid job file")
)

// invalidJobError keeps the message of a parse error and makes it match
// ErrInvalidJob too.
type invalidJobError struct{ err error }

func (e *invalidJobError) Error() string   { return e.err.Error() }
func (e *invalidJobError) Unwrap() []error { return []error{e.err, ErrInvalidJob} }

// enforceIndexErrPrefix starts Nomad's answer to a failed check-and-set
// register.
const enforceIndexErrPrefix = "Enforcing job modify index"

// IsPermissionDenied reports whether Nomad refused a request for its token
// (401 or 403): the token is missing, unknown, expired, or lacks a
// capability.
func IsPermissionDenied(err error) bool {
	code := statusCode(err)
	return code == 401 || code == 403
}
