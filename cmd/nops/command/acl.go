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

// aclCall is what an acl command does once its flags and arguments are
// read: it returns what -json prints and a function that prints it
// otherwise.
type aclCall func(api *client.Client, pos []string) (any, func(), error)

// runACL runs an acl command: spec's flags and arguments, then call.
func (m *runner) runACL(c command, args []string, spec apiArgs, call aclCall) int {
	return m.runAPI(c, args, spec, func(api *client.Client, pos []string, asJSON bool) int {
		out, print, err := call(api, pos)
		if err != nil {
			return m.fail(err)
		}
		if asJSON {
			return m.printJSON(out)
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

// printTokenCall returns a token as an acl command's result.
func (m *runner) printTokenCall(t *structs.ACLTokenView) (any, func(), error) {
	return t, func() { m.printToken(t) }, nil
}

// aclBootstrapCommand creates the first management token.
type aclBootstrapCommand struct {
	m *runner
}

func (c *aclBootstrapCommand) Synopsis() string { return "Create the first management token" }

func (c *aclBootstrapCommand) Help() string {
	return `Usage: nops acl bootstrap [options]

  Creates the first management token of a cluster with ACLs enabled. It
  works once; a second bootstrap is refused with the reset index, which an
  operator writes to the file acl-bootstrap-reset in the data dir of the
  leader to allow one more.
` + apiFlagsHelp
}

func (c *aclBootstrapCommand) Run(ctx context.Context, args []string) int {
	return c.m.runACL(c, args, apiArgs{name: "acl bootstrap"}, func(api *client.Client, _ []string) (any, func(), error) {
		t, err := api.ACL().Bootstrap(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("ACL bootstrap: %w", err)
		}
		return c.m.printTokenCall(t)
	})
}

// aclPolicyApplyCommand creates or replaces a policy from a rules file.
type aclPolicyApplyCommand struct {
	m *runner
}

func (c *aclPolicyApplyCommand) Synopsis() string {
	return "Create or replace an ACL policy from a file"
}

func (c *aclPolicyApplyCommand) Help() string {
	return `Usage: nops acl policy apply [options] <name> <path>

  Creates or replaces the policy <name> with the rules (HCL or JSON) in the
  file <path>; "-" reads them from stdin. The server checks the rules and
  lists every problem.

Options:

  -description=<text>
    What the policy is for.
` + apiFlagsHelp
}

func (c *aclPolicyApplyCommand) Run(ctx context.Context, args []string) int {
	var desc string
	spec := apiArgs{name: "acl policy apply", min: 2, max: 2, desc: "a policy name and a rules file",
		flags: func(fs *flag.FlagSet) { fs.StringVar(&desc, "description", "", "") }}
	return c.m.runACL(c, args, spec, func(api *client.Client, pos []string) (any, func(), error) {
		raw, err := readRules(pos[1])
		if err != nil {
			return nil, nil, fmt.Errorf("read rules: %w", err)
		}
		p, err := api.ACL().PutPolicy(ctx, &structs.ACLPolicySpec{Name: pos[0], Description: desc, Rules: string(raw)})
		if err != nil {
			return nil, nil, fmt.Errorf("apply policy %q: %w", pos[0], err)
		}
		return p, func() { fmt.Fprintf(c.m.stdout, "Policy %q applied\n", p.Name) }, nil
	})
}

// readRules reads a rules file, or stdin for "-".
func readRules(path string) ([]byte, error) {
	if path == "-" {
		return readAllLimited(os.Stdin)
	}
	return os.ReadFile(path)
}

// aclPolicyList lists the policies.
func (m *runner) aclPolicyList() command {
	return &aclListCommand[*structs.ACLPolicy]{m: m, name: "acl policy list", synopsis: "List the ACL policies",
		does: "Lists the ACL policies.", list: (*client.ACL).Policies,
		table: table[*structs.ACLPolicy]{header: "Name\tDescription", empty: "No policies",
			row: func(p *structs.ACLPolicy) string { return p.Name + "\t" + orDash(p.Description) }}}
}

// aclPolicyInfo shows a policy and its rules.
func (m *runner) aclPolicyInfo() command {
	return &aclInfoCommand[*structs.ACLPolicy]{m: m, name: "acl policy info", synopsis: "Show an ACL policy and its rules",
		does: "Shows a policy and its rules.", arg: "name", desc: "a policy name", get: (*client.ACL).Policy, fail: "policy %q",
		show: func(m *runner, p *structs.ACLPolicy) {
			m.kv("Name", p.Name, "Description", orDash(p.Description), "Create Index", fmt.Sprint(p.CreateIndex), "Modify Index", fmt.Sprint(p.ModifyIndex))
			fmt.Fprintf(m.stdout, "\nRules\n\n%s\n", strings.TrimRight(p.Rules, "\n"))
		}}
}

// writeMode is whether a create-or-update command creates (true) or
// replaces an existing object (false).
type writeMode bool

func (w writeMode) verb() string {
	if w {
		return "create"
	}
	return "update"
}

// does is the verb of the command's help.
func (w writeMode) does() string {
	if w {
		return "Creates"
	}
	return "Replaces"
}

// check refuses to create what exists, and to update what does not: getErr
// is the error of reading the object, what and name name it, group is the
// commands' group ("acl role").
func (w writeMode) check(getErr error, what, name, group string) error {
	switch create := bool(w); {
	case create && getErr == nil:
		return fmt.Errorf("%s %q already exists: use nops %s update", what, name, group)
	case !create && getErr != nil:
		return fmt.Errorf("%s %q: %w", what, name, getErr)
	}
	return nil
}

// aclRoleWriteCommand creates a role, or replaces one (update).
type aclRoleWriteCommand struct {
	m      *runner
	create writeMode
}

func (c *aclRoleWriteCommand) Synopsis() string {
	if c.create {
		return "Create an ACL role"
	}
	return "Replace the policies of an ACL role"
}

func (c *aclRoleWriteCommand) Help() string {
	return fmt.Sprintf("Usage: nops acl role %s [options] <name>\n\n  %s an ACL role: a named set of policies that tokens and binding rules use.\n", c.create.verb(), c.create.does()) + `
Options:

  -policy=<name>
    A policy of the role; repeat for several. At least one.

  -description=<text>
    What the role is for.
` + apiFlagsHelp
}

func (c *aclRoleWriteCommand) Run(ctx context.Context, args []string) int {
	var desc string
	var pols stringList
	spec := apiArgs{name: "acl role " + c.create.verb(), min: 1, max: 1, desc: "a role name", flags: func(fs *flag.FlagSet) {
		fs.StringVar(&desc, "description", "", "")
		fs.Var(&pols, "policy", "")
	}}
	return c.m.runACL(c, args, spec, func(api *client.Client, pos []string) (any, func(), error) {
		_, err := api.ACL().Role(ctx, pos[0])
		if err := c.create.check(err, "role", pos[0], "acl role"); err != nil {
			return nil, nil, err
		}
		r, err := api.ACL().PutRole(ctx, &structs.ACLRoleSpec{Name: pos[0], Description: desc, Policies: pols})
		if err != nil {
			return nil, nil, fmt.Errorf("%s role %q: %w", c.create.verb(), pos[0], err)
		}
		return r, func() { fmt.Fprintf(c.m.stdout, "Role %q %sd\n", r.Name, c.create.verb()) }, nil
	})
}

// aclRoleList lists the roles.
func (m *runner) aclRoleList() command {
	return &aclListCommand[*structs.ACLRole]{m: m, name: "acl role list", synopsis: "List the ACL roles",
		does: "Lists the ACL roles.", list: (*client.ACL).Roles,
		table: table[*structs.ACLRole]{header: "Name\tPolicies\tDescription", empty: "No roles",
			row: func(r *structs.ACLRole) string {
				return r.Name + "\t" + strings.Join(r.Policies, ",") + "\t" + orDash(r.Description)
			}}}
}

// aclRoleInfo shows a role.
func (m *runner) aclRoleInfo() command {
	return &aclInfoCommand[*structs.ACLRole]{m: m, name: "acl role info", synopsis: "Show an ACL role",
		does: "Shows a role.", arg: "name", desc: "a role name", get: (*client.ACL).Role, fail: "role %q",
		show: func(m *runner, r *structs.ACLRole) {
			m.kv("Name", r.Name, "Description", orDash(r.Description), "Policies", strings.Join(r.Policies, ","))
		}}
}

// tokenFlags are the flags of acl token create and update.
type tokenFlags struct {
	name, typ, ttl string
	pols, roles    stringList
}

func (f *tokenFlags) register(withTTL bool) func(fs *flag.FlagSet) {
	return func(fs *flag.FlagSet) {
		fs.StringVar(&f.name, "name", "", "")
		fs.StringVar(&f.typ, "type", "", "")
		fs.Var(&f.pols, "policy", "")
		fs.Var(&f.roles, "role", "")
		if withTTL {
			fs.StringVar(&f.ttl, "ttl", "", "")
		}
	}
}

func (f *tokenFlags) spec() *structs.ACLTokenSpec {
	return &structs.ACLTokenSpec{Name: f.name, Type: f.typ, Policies: f.pols, Roles: f.roles, ExpirationTTL: f.ttl}
}

// tokenFlagsHelp documents tokenFlags.
const tokenFlagsHelp = `
Options:

  -name=<name>
    The token's name; it is recorded as the actor of what the token does.

  -type=<client|management>
    Default: client.

  -policy=<name>, -role=<name>
    A policy or role of a client token; repeat for several.
`

// aclTokenCreateCommand creates a token.
type aclTokenCreateCommand struct {
	m *runner
}

func (c *aclTokenCreateCommand) Synopsis() string { return "Create an ACL token" }

func (c *aclTokenCreateCommand) Help() string {
	return "Usage: nops acl token create [options]\n\n  Creates a token and prints its secret, which is shown only this once.\n" + tokenFlagsHelp +
		"\n  -ttl=<duration>\n    The token expires after this long (a Go duration). Default: never.\n" + apiFlagsHelp
}

func (c *aclTokenCreateCommand) Run(ctx context.Context, args []string) int {
	var f tokenFlags
	return c.m.runACL(c, args, apiArgs{name: "acl token create", flags: f.register(true)}, func(api *client.Client, _ []string) (any, func(), error) {
		t, err := api.ACL().CreateToken(ctx, f.spec())
		if err != nil {
			return nil, nil, fmt.Errorf("create token: %w", err)
		}
		return c.m.printTokenCall(t)
	})
}

// aclTokenUpdateCommand replaces a token's name, type, policies and roles.
type aclTokenUpdateCommand struct {
	m *runner
}

func (c *aclTokenUpdateCommand) Synopsis() string {
	return "Change an ACL token's name, policies and roles"
}

func (c *aclTokenUpdateCommand) Help() string {
	return "Usage: nops acl token update [options] <accessor_id>\n\n  Replaces a token's name, type, policies and roles (the secret and the\n  expiry stay). Flags not given are cleared, except -type.\n" +
		tokenFlagsHelp + apiFlagsHelp
}

func (c *aclTokenUpdateCommand) Run(ctx context.Context, args []string) int {
	var f tokenFlags
	spec := apiArgs{name: "acl token update", min: 1, max: 1, desc: "an accessor ID", flags: f.register(false)}
	return c.m.runACL(c, args, spec, func(api *client.Client, pos []string) (any, func(), error) {
		t, err := api.ACL().UpdateToken(ctx, pos[0], f.spec())
		if err != nil {
			return nil, nil, fmt.Errorf("update token %s: %w", pos[0], err)
		}
		return c.m.printTokenCall(t)
	})
}

// aclTokenList lists the tokens, never their secrets.
func (m *runner) aclTokenList() command {
	return &aclListCommand[*structs.ACLTokenView]{m: m, name: "acl token list", synopsis: "List the ACL tokens",
		does: "Lists the tokens (never their secrets).", list: (*client.ACL).Tokens,
		table: table[*structs.ACLTokenView]{header: "Accessor ID\tName\tType\tPolicies\tRoles\tExpires", empty: "No tokens",
			row: tokenRow}}
}

func tokenRow(t *structs.ACLTokenView) string {
	exp := "never"
	if t.ExpirationTime != nil {
		exp = formatTime(*t.ExpirationTime)
	}
	return strings.Join([]string{t.AccessorID, orDash(t.Name), t.Type, orDash(strings.Join(t.Policies, ",")),
		orDash(strings.Join(t.Roles, ",")), exp}, "\t")
}

// aclTokenInfo shows a token, never its secret.
func (m *runner) aclTokenInfo() command {
	return &aclInfoCommand[*structs.ACLTokenView]{m: m, name: "acl token info", synopsis: "Show an ACL token",
		does: "Shows a token (never its secret).", arg: "accessor_id", desc: "an accessor ID", get: (*client.ACL).Token,
		fail: "token %s", show: (*runner).printToken}
}

// aclTokenSelfCommand shows the token the command sends.
type aclTokenSelfCommand struct {
	m *runner
}

func (c *aclTokenSelfCommand) Synopsis() string { return "Show the token this command sends" }

func (c *aclTokenSelfCommand) Help() string {
	return "Usage: nops acl token self [options]\n\n  Shows the token given by -token or NOPS_TOKEN.\n" + apiFlagsHelp
}

func (c *aclTokenSelfCommand) Run(ctx context.Context, args []string) int {
	return c.m.runACL(c, args, apiArgs{name: "acl token self"}, func(api *client.Client, _ []string) (any, func(), error) {
		t, err := api.ACL().TokenSelf(ctx)
		if err != nil {
			return nil, nil, fmt.Errorf("token self: %w", err)
		}
		return c.m.printTokenCall(t)
	})
}

// aclInfoCommand shows one ACL object.
type aclInfoCommand[T any] struct {
	m *runner
	// name is the command's name; does is the sentence of its help; arg
	// names its argument in the usage, desc in errors ("a policy name").
	name, synopsis, does, arg, desc string
	// get is the method of the API client that reads the object; fail is
	// the format, with the argument, of its error.
	get  func(acl *client.ACL, ctx context.Context, id string) (T, error)
	fail string
	show func(m *runner, v T)
}

func (c *aclInfoCommand[T]) Synopsis() string { return c.synopsis }

func (c *aclInfoCommand[T]) Help() string {
	return "Usage: nops " + c.name + " [options] <" + c.arg + ">\n\n  " + c.does + "\n" + apiFlagsHelp
}

func (c *aclInfoCommand[T]) Run(ctx context.Context, args []string) int {
	spec := apiArgs{name: c.name, min: 1, max: 1, desc: c.desc}
	return c.m.runACL(c, args, spec, func(api *client.Client, pos []string) (any, func(), error) {
		v, err := c.get(api.ACL(), ctx, pos[0])
		if err != nil {
			return nil, nil, fmt.Errorf(c.fail+": %w", pos[0], err)
		}
		return v, func() { c.show(c.m, v) }, nil
	})
}

// aclDeleteCommand deletes one named ACL object: a policy, a role, a
// token, an auth method or a binding rule.
type aclDeleteCommand struct {
	m *runner
	// name is the command's name; what is the object deleted, with its
	// article ("an ACL policy"); desc names its argument ("a policy name").
	name, what, desc string
	del              func(acl *client.ACL, ctx context.Context, n string) error
}

func (c *aclDeleteCommand) Synopsis() string { return "Delete " + c.what }

func (c *aclDeleteCommand) Help() string {
	return fmt.Sprintf("Usage: nops %s [options] <%s>\n\n  Deletes %s.\n", c.name, withoutArticle(c.desc), c.what) + apiFlagsHelp
}

func (c *aclDeleteCommand) Run(ctx context.Context, args []string) int {
	spec := apiArgs{name: c.name, min: 1, max: 1, desc: c.desc}
	return c.m.runACL(c, args, spec, func(api *client.Client, pos []string) (any, func(), error) {
		if err := c.del(api.ACL(), ctx, pos[0]); err != nil {
			return nil, nil, fmt.Errorf("delete %s %q: %w", withoutArticle(c.what), pos[0], err)
		}
		return map[string]string{"deleted": pos[0]}, func() { fmt.Fprintf(c.m.stdout, "Deleted %q\n", pos[0]) }, nil
	})
}

// aclListCommand lists the ACL objects of one kind as a table.
type aclListCommand[T any] struct {
	m *runner
	// name is the command's name; does is the sentence of its help.
	name, synopsis, does string
	// list is the method of the API client that lists the objects.
	list  func(acl *client.ACL, ctx context.Context) ([]T, error)
	table table[T]
}

func (c *aclListCommand[T]) Synopsis() string { return c.synopsis }

func (c *aclListCommand[T]) Help() string {
	return "Usage: nops " + c.name + " [options]\n\n  " + c.does + "\n" + apiFlagsHelp
}

func (c *aclListCommand[T]) Run(ctx context.Context, args []string) int {
	return c.m.runACL(c, args, apiArgs{name: c.name}, func(api *client.Client, _ []string) (any, func(), error) {
		list, err := c.list(api.ACL(), ctx)
		if list == nil {
			list = []T{}
		}
		return list, func() { c.table.print(c.m, list) }, err
	})
}

func withoutArticle(s string) string {
	return strings.TrimPrefix(strings.TrimPrefix(s, "an "), "a ")
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

// aclDelete returns the command name, which deletes what with del, a
// method of the API client.
func (m *runner) aclDelete(name, what, desc string, del func(acl *client.ACL, ctx context.Context, n string) error) *aclDeleteCommand {
	return &aclDeleteCommand{m: m, name: name, what: what, desc: desc, del: del}
}
