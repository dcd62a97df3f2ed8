//go:build tools

// Package tools pins the Nomad server that the integration tests run. It is
// built with `make nomad`; nothing in Nops imports it.
package tools

import _ "github.com/hashicorp/nomad"
