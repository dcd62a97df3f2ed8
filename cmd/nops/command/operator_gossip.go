package command

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sort"

	"github.com/nops-dev/nops/agent"
	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
)

// gossipKeyringCommand manages the gossip encryption keys of the cluster.
type gossipKeyringCommand struct {
	m *runner
}

func (c *gossipKeyringCommand) Synopsis() string { return "Manage the gossip encryption keys" }

func (c *gossipKeyringCommand) Help() string {
	return `Usage: nops operator gossip keyring [-list | -install=<key> | -use=<key> | -remove=<key>] [options]

  Manages the keys that encrypt gossip between servers, on every server at
  once. Rotate a key in three steps: -install the new key, -use it, then
  -remove the old one. Each server keeps its keyring in its data dir, so a
  rotation survives restarts. Keys are listed by fingerprint ("sha256:" and
  the first 16 hex digits of the SHA-256 of the key's bytes), never in full.

Options:

  -list
    List the installed keys and how many servers have and use each.

  -install=<key>
    Install a base64 key on every server, without using it yet.

  -use=<key>
    Encrypt with an installed key from now on.

  -remove=<key>
    Remove a key that is no longer used.
` + apiFlagsHelp
}

func (c *gossipKeyringCommand) Run(ctx context.Context, args []string) int {
	m := c.m
	var list bool
	var install, use, remove string
	spec := apiArgs{
		name: "operator gossip keyring",
		flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&list, "list", false, "")
			fs.StringVar(&install, "install", "", "")
			fs.StringVar(&use, "use", "", "")
			fs.StringVar(&remove, "remove", "", "")
		},
		check: func([]string) error {
			n := 0
			for _, set := range []bool{list, install != "", use != "", remove != ""} {
				if set {
					n++
				}
			}
			if n != 1 {
				return errors.New("give exactly one of -list, -install, -use and -remove")
			}
			return nil
		},
	}
	return m.runAPI(c, args, spec, func(api *client.Client, _ []string, asJSON bool) int {
		var resp *structs.KeyringResponse
		var err error
		var done string
		switch {
		case list:
			resp, err = api.Operator().KeyringList(ctx)
		case install != "":
			resp, err = api.Operator().KeyringInstall(ctx, install)
			done = "Installed key " + agent.KeyFingerprint(install)
		case use != "":
			resp, err = api.Operator().KeyringUse(ctx, use)
			done = "Now using key " + agent.KeyFingerprint(use)
		case remove != "":
			resp, err = api.Operator().KeyringRemove(ctx, remove)
			done = "Removed key " + agent.KeyFingerprint(remove)
		}
		if err != nil {
			if resp != nil {
				c.printFailures(resp)
			}
			return m.fail(err)
		}
		if asJSON {
			return m.printJSON(resp)
		}
		if done != "" {
			fmt.Fprintf(m.stdout, "%s on %d of %d servers\n", done, resp.NumResp-resp.NumErr, resp.NumNodes)
			return exitOK
		}
		keys := make([]string, 0, len(resp.Keys))
		for k := range resp.Keys {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		tw := m.tabWriter()
		fmt.Fprintln(tw, "Key\tInstalled\tPrimary")
		for _, k := range keys {
			fmt.Fprintf(tw, "%s\t%d/%d\t%d/%d\n", k, resp.Keys[k], resp.NumNodes, resp.PrimaryKeys[k], resp.NumNodes)
		}
		tw.Flush()
		return exitOK
	})
}

func (c *gossipKeyringCommand) printFailures(resp *structs.KeyringResponse) {
	names := make([]string, 0, len(resp.Messages))
	for n := range resp.Messages {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(c.m.stderr, "  %s: %s\n", n, resp.Messages[n])
	}
}

// gossipKeygenCommand prints a new gossip encryption key.
type gossipKeygenCommand struct {
	m *runner
}

func (c *gossipKeygenCommand) Synopsis() string { return "Generate a new gossip encryption key" }

func (c *gossipKeygenCommand) Help() string {
	return `Usage: nops operator gossip keygen

  Prints a new random 32-byte key, base64, for -encrypt (or encrypt in a
  config file) and "nops operator gossip keyring -install". It contacts no
  server.
`
}

func (c *gossipKeygenCommand) Run(_ context.Context, args []string) int {
	m := c.m
	if _, code, ok := m.parse(c, newFlagSet("operator gossip keygen"), args, 0, 0, ""); !ok {
		return code
	}
	key, err := agent.GenerateGossipKey()
	if err != nil {
		return m.fail(err)
	}
	fmt.Fprintln(m.stdout, key)
	return exitOK
}
