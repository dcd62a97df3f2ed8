//go:build tools

// Package tools pins the Consul agent that the discovery tests run. It is
// built with `make consul`; nothing in Nops imports it.
package tools

import _ "github.com/hashicorp/consul"
