// Command nops is the Nops binary: `nops serve` runs a server, and the other
// subcommands are clients of its HTTP API. See package command.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/nops-dev/nops/cmd/nops/command"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := command.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
