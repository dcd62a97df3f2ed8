package command

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
)

// aclCommand is one `nops acl ...` command: its flags, its arguments, and
// a call that returns what -json prints and a function that prints it
// otherwise.
type aclCommand struct {
	m        *runner
	name     string
	synopsis string
	help     string
	min, max int
	desc     string
	flags    func(fs *flag.FlagSet)
	check    func(pos []string) error
	run      func(ctx context.Context, api *client.Client, pos []string) (any, func(), error)
}

func (c *aclCommand) Synopsis() string { return c.synopsis }
func (c *aclCommand) Help() string     { return c.help + apiFlagsHelp }

func (c *aclCommand) Run(ctx context.Context, args []string) int {
	spec := apiArgs{name: c.name, min: c.min, max: c.max, desc: c.desc, flags: c.flags, check: c.check}
	return c.m.runAPI(c, args, spec, func(api *client.Client, pos []string, asJSON bool) int {
		out, print, err := c.run(ctx, api, pos)
		if err != nil {
			return c.m.fail(err)
		}
		if asJSON {
			return c.m.printJSON(out)
		}
		print()
		return exitOK
	})
}

// stringList is a repeatable flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error {
	if strings.TrimSpace(v) == "" {
		return errors.New("must not be empty")
	}
	*s = append(*s, v)
	return nil
}

func (m *runner) printToken(t *structs.ACLTokenView) {
	expiry := "never"
	if t.ExpirationTime != nil {
		expiry = m.timeAgo(*t.ExpirationTime)
	}
	pairs := []string{"Accessor ID", t.AccessorID}
	if t.SecretID != "" {
		pairs = append(pairs, "Secret ID", t.SecretID)
	}
	pairs = append(pairs, "Name", orDash(t.Name), "Type", t.Type, "Policies", orDash(strings.Join(t.Policies, ",")),
		"Roles", orDash(strings.Join(t.Roles, ",")), "Auth Method", orDash(t.AuthMethod),
		"Create Time", formatTime(t.CreateTime), "Expiry Time", expiry)
	m.kv(pairs...)
}

func (m *runner) aclCommands() map[string]command {
	cmds := map[string]command{}
	add := func(c *aclCommand) {
		c.m = m
		cmds[c.name] = c
	}

	add(&aclCommand{name: "acl bootstrap", synopsis: "Create the first management token", max: 0,
		help: `Usage: nops acl bootstrap [options]

  Creates the first management token of a cluster with ACLs enabled. It
  works once; a second bootstrap is refused with the reset index, which an
  operator writes to the file acl-bootstrap-reset in the data dir of the
  leader to allow one more.
`,
		run: func(ctx context.Context, api *client.Client, _ []string) (any, func(), error) {
			t, err := api.ACLBootstrap(ctx)
			if err != nil {
				return nil, nil, fmt.Errorf("ACL bootstrap: %w", err)
			}
			return t, func() { m.printToken(t) }, nil
		}})

	// Policies.
	var polDesc string
	add(&aclCommand{name: "acl policy apply", synopsis: "Create or replace an ACL policy from a file", min: 2, max: 2,
		desc:  "a policy name and a rules file",
		flags: func(fs *flag.FlagSet) { fs.StringVar(&polDesc, "description", "", "") },
		help: `Usage: nops acl policy apply [options] <name> <path>

  Creates or replaces the policy <name> with the rules (HCL or JSON) in the
  file <path>; "-" reads them from stdin. The server checks the rules and
  lists every problem.

Options:

  -description=<text>
    What the policy is for.
`,
		run: func(ctx context.Context, api *client.Client, pos []string) (any, func(), error) {
			var raw []byte
			var err error
			if pos[1] == "-" {
				raw, err = readAllLimited(os.Stdin)
			} else {
				raw, err = os.ReadFile(pos[1])
			}
			if err != nil {
				return nil, nil, fmt.Errorf("read rules: %w", err)
			}
			p, err := api.PutACLPolicy(ctx, &structs.ACLPolicySpec{Name: pos[0], Description: polDesc, Rules: string(raw)})
			if err != nil {
				return nil, nil, fmt.Errorf("apply policy %q: %w", pos[0], err)
			}
			return p, func() { fmt.Fprintf(m.stdout, "Policy %q applied\n", p.Name) }, nil
		}})
	add(&aclCommand{name: "acl policy list", synopsis: "List the ACL policies", max: 0,
		help: "Usage: nops acl policy list [options]\n\n  Lists the ACL policies.\n",
		run: func(ctx context.Context, api *client.Client, _ []string) (any, func(), error) {
			list, err := api.ACLPolicies(ctx)
			if list == nil {
				list = []*structs.ACLPolicy{}
			}
			return list, func() {
				table[*structs.ACLPolicy]{header: "Name\tDescription", empty: "No policies",
					row: func(p *structs.ACLPolicy) string { return p.Name + "\t" + orDash(p.Description) }}.print(m, list)
			}, err
		}})
	add(&aclCommand{name: "acl policy info", synopsis: "Show an ACL policy and its rules", min: 1, max: 1, desc: "a policy name",
		help: "Usage: nops acl policy info [options] <name>\n\n  Shows a policy and its rules.\n",
		run: func(ctx context.Context, api *client.Client, pos []string) (any, func(), error) {
			p, err := api.ACLPolicy(ctx, pos[0])
			if err != nil {
				return nil, nil, fmt.Errorf("policy %q: %w", pos[0], err)
			}
			return p, func() {
				m.kv("Name", p.Name, "Description", orDash(p.Description), "Create Index", fmt.Sprint(p.CreateIndex), "Modify Index", fmt.Sprint(p.ModifyIndex))
				fmt.Fprintf(m.stdout, "\nRules\n\n%s\n", strings.TrimRight(p.Rules, "\n"))
			}, nil
		}})
	add(m.deleteCommand("acl policy delete", "an ACL policy", "a policy name", func(ctx context.Context, api *client.Client, n string) error {
		return api.DeleteACLPolicy(ctx, n)
	}))

	// Roles.
	roleFlags := func(desc *string, pols *stringList) func(fs *flag.FlagSet) {
		return func(fs *flag.FlagSet) {
			fs.StringVar(desc, "description", "", "")
			fs.Var(pols, "policy", "")
		}
	}
	roleHelp := `
Options:

  -policy=<name>
    A policy of the role; repeat for several. At least one.

  -description=<text>
    What the role is for.
`
	for _, verb := range []string{"create", "update"} {
		var desc string
		var pols stringList
		create := verb == "create"
		add(&aclCommand{name: "acl role " + verb, synopsis: map[bool]string{true: "Create an ACL role", false: "Replace the policies of an ACL role"}[create],
			min: 1, max: 1, desc: "a role name", flags: roleFlags(&desc, &pols),
			help: fmt.Sprintf("Usage: nops acl role %s [options] <name>\n\n  %s an ACL role: a named set of policies that tokens and binding rules use.\n%s",
				verb, map[bool]string{true: "Creates", false: "Replaces"}[create], roleHelp),
			run: func(ctx context.Context, api *client.Client, pos []string) (any, func(), error) {
				if create {
					if _, err := api.ACLRole(ctx, pos[0]); err == nil {
						return nil, nil, fmt.Errorf("role %q already exists: use nops acl role update", pos[0])
					}
				} else if _, err := api.ACLRole(ctx, pos[0]); err != nil {
					return nil, nil, fmt.Errorf("role %q: %w", pos[0], err)
				}
				r, err := api.PutACLRole(ctx, &structs.ACLRoleSpec{Name: pos[0], Description: desc, Policies: pols})
				if err != nil {
					return nil, nil, fmt.Errorf("%s role %q: %w", verb, pos[0], err)
				}
				return r, func() { fmt.Fprintf(m.stdout, "Role %q %sd\n", r.Name, verb) }, nil
			}})
	}
	add(&aclCommand{name: "acl role list", synopsis: "List the ACL roles", max: 0,
		help: "Usage: nops acl role list [options]\n\n  Lists the ACL roles.\n",
		run: func(ctx context.Context, api *client.Client, _ []string) (any, func(), error) {
			list, err := api.ACLRoles(ctx)
			if list == nil {
				list = []*structs.ACLRole{}
			}
			return list, func() {
				table[*structs.ACLRole]{header: "Name\tPolicies\tDescription", empty: "No roles",
					row: func(r *structs.ACLRole) string {
						return r.Name + "\t" + strings.Join(r.Policies, ",") + "\t" + orDash(r.Description)
					}}.print(m, list)
			}, err
		}})
	add(&aclCommand{name: "acl role info", synopsis: "Show an ACL role", min: 1, max: 1, desc: "a role name",
		help: "Usage: nops acl role info [options] <name>\n\n  Shows a role.\n",
		run: func(ctx context.Context, api *client.Client, pos []string) (any, func(), error) {
			r, err := api.ACLRole(ctx, pos[0])
			if err != nil {
				return nil, nil, fmt.Errorf("role %q: %w", pos[0], err)
			}
			return r, func() {
				m.kv("Name", r.Name, "Description", orDash(r.Description), "Policies", strings.Join(r.Policies, ","))
			}, nil
		}})
	add(m.deleteCommand("acl role delete", "an ACL role", "a role name", func(ctx context.Context, api *client.Client, n string) error {
		return api.DeleteACLRole(ctx, n)
	}))

	// Tokens.
	var (
		tokName, tokType, tokTTL string
		tokPols, tokRoles        stringList
	)
	tokenFlags := func(withTTL bool) func(fs *flag.FlagSet) {
		return func(fs *flag.FlagSet) {
			fs.StringVar(&tokName, "name", "", "")
			fs.StringVar(&tokType, "type", "", "")
			fs.Var(&tokPols, "policy", "")
			fs.Var(&tokRoles, "role", "")
			if withTTL {
				fs.StringVar(&tokTTL, "ttl", "", "")
			}
		}
	}
	tokenHelp := `
Options:

  -name=<name>
    The token's name; it is recorded as the actor of what the token does.

  -type=<client|management>
    Default: client.

  -policy=<name>, -role=<name>
    A policy or role of a client token; repeat for several.
`
	add(&aclCommand{name: "acl token create", synopsis: "Create an ACL token", max: 0, flags: tokenFlags(true),
		help: "Usage: nops acl token create [options]\n\n  Creates a token and prints its secret, which is shown only this once.\n" + tokenHelp +
			"\n  -ttl=<duration>\n    The token expires after this long (a Go duration). Default: never.\n",
		run: func(ctx context.Context, api *client.Client, _ []string) (any, func(), error) {
			t, err := api.CreateACLToken(ctx, &structs.ACLTokenSpec{Name: tokName, Type: tokType, Policies: tokPols, Roles: tokRoles, ExpirationTTL: tokTTL})
			if err != nil {
				return nil, nil, fmt.Errorf("create token: %w", err)
			}
			return t, func() { m.printToken(t) }, nil
		}})
	add(&aclCommand{name: "acl token update", synopsis: "Change an ACL token's name, policies and roles", min: 1, max: 1, desc: "an accessor ID",
		flags: tokenFlags(false),
		help:  "Usage: nops acl token update [options] <accessor_id>\n\n  Replaces a token's name, type, policies and roles (the secret and the\n  expiry stay). Flags not given are cleared, except -type.\n" + tokenHelp,
		run: func(ctx context.Context, api *client.Client, pos []string) (any, func(), error) {
			t, err := api.UpdateACLToken(ctx, pos[0], &structs.ACLTokenSpec{Name: tokName, Type: tokType, Policies: tokPols, Roles: tokRoles})
			if err != nil {
				return nil, nil, fmt.Errorf("update token %s: %w", pos[0], err)
			}
			return t, func() { m.printToken(t) }, nil
		}})
	add(&aclCommand{name: "acl token list", synopsis: "List the ACL tokens", max: 0,
		help: "Usage: nops acl token list [options]\n\n  Lists the tokens (never their secrets).\n",
		run: func(ctx context.Context, api *client.Client, _ []string) (any, func(), error) {
			list, err := api.ACLTokens(ctx)
			if list == nil {
				list = []*structs.ACLTokenView{}
			}
			return list, func() {
				table[*structs.ACLTokenView]{header: "Accessor ID\tName\tType\tPolicies\tRoles\tExpires", empty: "No tokens",
					row: func(t *structs.ACLTokenView) string {
						exp := "never"
						if t.ExpirationTime != nil {
							exp = formatTime(*t.ExpirationTime)
						}
						return strings.Join([]string{t.AccessorID, orDash(t.Name), t.Type, orDash(strings.Join(t.Policies, ",")),
							orDash(strings.Join(t.Roles, ",")), exp}, "\t")
					}}.print(m, list)
			}, err
		}})
	add(&aclCommand{name: "acl token info", synopsis: "Show an ACL token", min: 1, max: 1, desc: "an accessor ID",
		help: "Usage: nops acl token info [options] <accessor_id>\n\n  Shows a token (never its secret).\n",
		run: func(ctx context.Context, api *client.Client, pos []string) (any, func(), error) {
			t, err := api.ACLToken(ctx, pos[0])
			if err != nil {
				return nil, nil, fmt.Errorf("token %s: %w", pos[0], err)
			}
			return t, func() { m.printToken(t) }, nil
		}})
	add(&aclCommand{name: "acl token self", synopsis: "Show the token this command sends", max: 0,
		help: "Usage: nops acl token self [options]\n\n  Shows the token given by -token or NOPS_TOKEN.\n",
		run: func(ctx context.Context, api *client.Client, _ []string) (any, func(), error) {
			t, err := api.ACLTokenSelf(ctx)
			if err != nil {
				return nil, nil, fmt.Errorf("token self: %w", err)
			}
			return t, func() { m.printToken(t) }, nil
		}})
	add(m.deleteCommand("acl token delete", "an ACL token", "an accessor ID", func(ctx context.Context, api *client.Client, n string) error {
		return api.DeleteACLToken(ctx, n)
	}))

	for k, v := range m.ssoCommands() {
		cmds[k] = v
	}
	return cmds
}

// deleteCommand is a command that deletes one named object.
func (m *runner) deleteCommand(name, what, desc string, del func(ctx context.Context, api *client.Client, n string) error) *aclCommand {
	return &aclCommand{name: name, synopsis: "Delete " + what, min: 1, max: 1, desc: desc,
		help: fmt.Sprintf("Usage: nops %s [options] <%s>\n\n  Deletes %s.\n", name, strings.TrimPrefix(strings.TrimPrefix(desc, "an "), "a "), what),
		run: func(ctx context.Context, api *client.Client, pos []string) (any, func(), error) {
			if err := del(ctx, api, pos[0]); err != nil {
				return nil, nil, fmt.Errorf("delete %s %q: %w", strings.TrimPrefix(strings.TrimPrefix(what, "an "), "a "), pos[0], err)
			}
			return map[string]string{"deleted": pos[0]}, func() { fmt.Fprintf(m.stdout, "Deleted %q\n", pos[0]) }, nil
		}}
}

// maxInput bounds policy rules read from stdin: the server takes rules of
// at most 64 KiB, so more is the wrong input, not a policy.
const maxInput = 1 << 20

// readAllLimited reads at most maxInput bytes.
func readAllLimited(r io.Reader) ([]byte, error) {
	raw, err := io.ReadAll(io.LimitReader(r, maxInput+1))
	if err == nil && len(raw) > maxInput {
		return nil, errors.New("input larger than 1 MiB")
	}
	return raw, err
}

// jsonFlag reads a JSON value from a flag: inline, or @file.
func jsonFlag(v string, out any) error {
	raw := []byte(v)
	if strings.HasPrefix(v, "@") {
		b, err := os.ReadFile(v[1:])
		if err != nil {
			return err
		}
		raw = b
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	return dec.Decode(out)
}
