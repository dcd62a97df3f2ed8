package agenthttp

import (
	"errors"
	"net/http"
)

// isAbort reports whether a recovered panic value is http.ErrAbortHandler,
// the panic net/http aborts a response with, which a handler's recover
// must pass on.
func isAbort(p any) bool {
	err, ok := p.(error)
	return ok && errors.Is(err, http.ErrAbortHandler)
}
