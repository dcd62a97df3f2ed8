package config

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"

	"github.com/nops-dev/nops/reconcile/gitwatch"
)

// Block types of config files.
const (
	blockRepository = "repository"
	blockAuth       = "auth"
	blockVerify     = "verify"
	blockConsul     = "consul"
	blockACL        = "acl"
	blockTLS        = "tls"
	blockNotify     = "notify"
	blockWebhook    = "webhook"
	blockAutopilot  = "autopilot"
)

// loadPath loads one -config argument: a file, or a directory whose *.hcl
// and *.json files load in lexical order.
func (l *loader) loadPath(p string) {
	info, err := os.Stat(p)
	if err != nil {
		l.errs = append(l.errs, fmt.Errorf("config file: %w", err))
		return
	}
	if !info.IsDir() {
		l.loadFile(p)
		return
	}
	entries, err := os.ReadDir(p)
	if err != nil {
		l.errs = append(l.errs, fmt.Errorf("config directory: %w", err))
		return
	}
	for _, e := range entries {
		if e.IsDir() || !(strings.HasSuffix(e.Name(), ".hcl") || strings.HasSuffix(e.Name(), ".json")) {
			continue
		}
		l.loadFile(filepath.Join(p, e.Name()))
	}
}

// loadFile applies one config file. Files ending in .json use the JSON
// syntax of HCL.
func (l *loader) loadFile(p string) {
	parser := hclparse.NewParser()
	var file *hcl.File
	var diags hcl.Diagnostics
	if strings.HasSuffix(p, ".json") {
		file, diags = parser.ParseJSONFile(p)
	} else {
		file, diags = parser.ParseHCLFile(p)
	}
	l.addDiags(withoutSource(diags))
	if diags.HasErrors() || file == nil {
		return
	}

	c := l.cfg
	var attrs []attrField
	for _, f := range c.fields() {
		attrs = append(attrs, attrField{name: f.hclName(), key: f.name, v: f.v})
	}
	var blocks []hcl.BlockHeaderSchema
	for _, b := range configBlocks() {
		blocks = append(blocks, b.schema())
	}
	content, set := l.decodeBody(file.Body, attrs, blocks)
	for key, attr := range set {
		l.origin[key] = fmt.Sprintf("%s:%d", attr.Range.Filename, attr.Range.Start.Line)
	}
	if content == nil {
		return
	}
	l.decodeBlocks(content.Blocks)
}

// decodeBlocks decodes the top-level blocks of one file, refusing a block
// defined twice in it.
func (l *loader) decodeBlocks(blocks hcl.Blocks) {
	seen := make(map[string]*hcl.Block)
	for _, b := range blocks {
		id := b.Type
		if len(b.Labels) > 0 {
			id += " " + fmt.Sprintf("%q", b.Labels[0])
		}
		if first, dup := seen[id]; dup {
			l.addDiags(hcl.Diagnostics{{
				Severity: hcl.DiagError,
				Summary:  fmt.Sprintf("Duplicate %s block", id),
				Detail:   fmt.Sprintf("A %s block is already defined at %s; define each one once per file.", id, first.DefRange),
				Subject:  b.DefRange.Ptr(),
			}})
			continue
		}
		seen[id] = b
		l.decodeBlock(b)
	}
}

// decodeBlock decodes one top-level block into the configuration.
func (l *loader) decodeBlock(b *hcl.Block) {
	c := l.cfg
	switch b.Type {
	case blockRepository:
		l.decodeRepository(b)
	case blockNomad:
		l.decodeNomad(b)
	case blockConsul:
		if c.Consul == nil {
			c.Consul = l.newConsul()
		}
		l.decodeBody(b.Body, consulFields(c.Consul), nil)
	case blockACL:
		l.decodeBody(b.Body, aclFields(&c.ACL), nil)
	case blockTLS:
		l.decodeBody(b.Body, tlsFields(&c.TLS), nil)
	case blockNotify:
		l.decodeNotify(b)
	case blockAutopilot:
		l.decodeBody(b.Body, autopilotFields(&c.Autopilot), nil)
	case blockRetention:
		l.decodeRetention(b)
	case blockApproval:
		l.decodeApproval(b)
	case blockWebhook:
		l.decodeBody(b.Body, webhookFields(&c.Webhook), nil)
	}
}

// decodeRepository merges a repository block into the repository of the
// same name, or adds one.
func (l *loader) decodeRepository(b *hcl.Block) {
	c := l.cfg
	name := b.Labels[0]
	i := indexOf(len(c.Repositories), func(i int) bool { return c.Repositories[i].Name == name })
	if i < 0 {
		c.Repositories = append(c.Repositories, newRepository(name))
		i = len(c.Repositories) - 1
	}
	r := &c.Repositories[i]
	content, _ := l.decodeBody(b.Body, repositoryFields(r), []hcl.BlockHeaderSchema{{Type: blockAuth}, {Type: blockVerify}})
	if content == nil {
		return
	}
	first := map[string]*hcl.Block{}
	for _, sb := range content.Blocks {
		if prev := first[sb.Type]; prev != nil {
			l.addDiags(hcl.Diagnostics{{
				Severity: hcl.DiagError,
				Summary:  fmt.Sprintf("Duplicate %s block", sb.Type),
				Detail:   fmt.Sprintf("Repository %q already has a %s block at %s.", name, sb.Type, prev.DefRange),
				Subject:  sb.DefRange.Ptr(),
			}})
			continue
		}
		first[sb.Type] = sb
		switch sb.Type {
		case blockAuth:
			if r.Auth == nil {
				r.Auth = &RepoAuth{}
			}
			l.decodeBody(sb.Body, authFields(r.Auth), nil)
		case blockVerify:
			if r.Verify == nil {
				r.Verify = &RepoVerify{}
			}
			l.decodeBody(sb.Body, verifyFields(r.Verify), nil)
		}
	}
}

// decodeNotify merges a notify block into the target of the same name, or
// adds one.
func (l *loader) decodeNotify(b *hcl.Block) {
	c := l.cfg
	name := b.Labels[0]
	i := indexOf(len(c.Notify), func(i int) bool { return c.Notify[i].Name == name })
	if i < 0 {
		c.Notify = append(c.Notify, NotifyConfig{Name: name})
		i = len(c.Notify) - 1
	}
	l.decodeBody(b.Body, notifyFields(&c.Notify[i]), nil)
}

func notifyFields(n *NotifyConfig) []attrField {
	return []attrField{
		{name: "kind", v: stringValue(&n.Kind, nil)},
		{name: "url", v: stringValue(&n.URL, nil)},
		{name: "url_env", v: stringValue(&n.URLEnv, nil)},
		{name: "events", v: listValue(&n.Events, nil, nil)},
		{name: "secret_env", v: stringValue(&n.SecretEnv, nil)},
		{name: "secret_file", v: stringValue(&n.SecretFile, nil)},
		{name: "channel", v: stringValue(&n.Channel, nil)},
		{name: "namespaces", v: listValue(&n.Namespaces, nil, nil)},
		{name: "jobs", v: listValue(&n.Jobs, nil, nil)},
		{name: "smtp_addr", v: stringValue(&n.SMTPAddr, nil)},
		{name: "from", v: stringValue(&n.From, nil)},
		{name: "to", v: listValue(&n.To, nil, nil)},
		{name: "username", v: stringValue(&n.Username, nil)},
		{name: "require_tls", v: boolValue(&n.RequireTLS)},
		{name: "job", v: stringValue(&n.NomadJob, nil)},
		{name: "namespace", v: stringValue(&n.NomadNamespace, nil)},
		{name: "cluster", v: stringValue(&n.NomadCluster, nil)},
		{name: "give_up_after", v: durationValue(&n.GiveUpAfter)},
		{name: "retry_initial", v: durationValue(&n.RetryInitial)},
		{name: "retry_max", v: durationValue(&n.RetryMax)},
	}
}

func repositoryFields(r *Repository) []attrField {
	return []attrField{
		{name: "url", v: stringValue(&r.URL, nil)},
		{name: "branch", v: stringValue(&r.Branch, checkBranch)},
		{name: "path", v: stringValue(&r.Path, checkRepoPath)},
		{name: "poll_interval", v: durationValue(&r.PollInterval)},
		{name: "web_url", v: stringValue(&r.WebURL, gitwatch.CheckWebURL)},
		{name: "cluster", v: stringValue(&r.Cluster, nil)},
	}
}

func aclFields(a *ACLConfig) []attrField {
	return []attrField{
		{name: "enabled", v: boolValue(&a.Enabled)},
		{name: "token_ttl", v: durationValue(&a.TokenTTL)},
	}
}

func webhookFields(w *WebhookConfig) []attrField {
	return []attrField{{name: "secret_env", v: stringValue(&w.SecretEnv, nil)}}
}

// configBlock is one block type of a config file, its label and the
// attributes and blocks of its body.
type configBlock struct {
	typ   string
	label string // the label's name; "" for a block without one
	attrs []attrField
	// nested are the blocks its body may hold.
	nested []configBlock
	// note is said of the block in help text.
	note string
}

func (b configBlock) schema() hcl.BlockHeaderSchema {
	s := hcl.BlockHeaderSchema{Type: b.typ}
	if b.label != "" {
		s.LabelNames = []string{b.label}
	}
	return s
}

// configBlocks is every top-level block a config file accepts, with the
// attributes of each bound to a zero value: the loader's schema and the
// help of `nops serve` are both made from it, and each decode function
// reads the attributes from the same fields function, so none of the three
// can leave a setting out.
func configBlocks() []configBlock {
	return []configBlock{
		{typ: blockRepository, label: "name", attrs: repositoryFields(&Repository{}),
			nested: []configBlock{{typ: blockAuth, attrs: authFields(&RepoAuth{})},
				{typ: blockVerify, attrs: verifyFields(&RepoVerify{})}},
			note: `cluster names a nomad block; default: the only cluster, else "default"`},
		{typ: blockNomad, label: "name", attrs: nomadFields(&NomadCluster{}),
			note: "one Nomad cluster to deploy to; with nomad blocks, nomad_addr, nomad_token, nomad_token_file, " +
				"nomad_region, nomad_task_api and nomad_ui_url are not set and NOMAD_ADDR, NOMAD_TOKEN and NOMAD_REGION " +
				"are not used; namespaces defaults to the top-level namespaces; requires lists the clusters a job " +
				"must have completed in first, bake how long ago at least"},
		{typ: blockConsul, attrs: consulFields(&ConsulConfig{})},
		{typ: blockACL, attrs: aclFields(&ACLConfig{})},
		{typ: blockTLS, attrs: tlsFields(&TLSConfig{})},
		{typ: blockNotify, label: "name", attrs: notifyFields(&NotifyConfig{}),
			note: `kind is "webhook", "slack", "email" or "nomad"`},
		{typ: blockWebhook, attrs: webhookFields(&WebhookConfig{})},
		{typ: blockAutopilot, attrs: autopilotFields(&AutopilotConfig{})},
		{typ: blockRetention, attrs: retentionFields(&RetentionConfig{})},
		{typ: blockApproval, attrs: approvalFields(&ApprovalConfig{})},
	}
}

// newConsul returns the defaults of a consul block: the address and token
// of the consul CLI's environment, or the local agent.
func (l *loader) newConsul() *ConsulConfig {
	cc := &ConsulConfig{Address: DefaultConsulAddress, ServiceName: DefaultConsulServiceName, AutoJoin: true}
	if s, ok := l.lookupEnv(envConsulAddr); ok && s != "" {
		cc.Address = s
	}
	if s, ok := l.lookupEnv(envConsulToken); ok && s != "" {
		cc.Token = s
	}
	return cc
}

func consulFields(cc *ConsulConfig) []attrField {
	return []attrField{
		{name: "address", v: stringValue(&cc.Address, nil)},
		{name: "token", v: stringValue(&cc.Token, nil)},
		{name: "service_name", v: stringValue(&cc.ServiceName, checkName)},
		{name: "auto_join", v: boolValue(&cc.AutoJoin)},
	}
}

func tlsFields(t *TLSConfig) []attrField {
	return []attrField{
		{name: "http", v: boolValue(&t.HTTP)},
		{name: "rpc", v: boolValue(&t.RPC)},
		{name: "ca_file", v: stringValue(&t.CAFile, nil)},
		{name: "cert_file", v: stringValue(&t.CertFile, nil)},
		{name: "key_file", v: stringValue(&t.KeyFile, nil)},
		{name: "verify_incoming", v: boolValue(&t.VerifyIncoming)},
		{name: "verify_server_hostname", v: boolValue(&t.VerifyServerHostname)},
	}
}

func autopilotFields(a *AutopilotConfig) []attrField {
	return []attrField{
		{name: "cleanup_dead_servers", v: boolValue(&a.CleanupDeadServers)},
		{name: "last_contact_threshold", v: durationValue(&a.LastContactThreshold)},
		{name: "max_trailing_logs", v: uint64Value(&a.MaxTrailingLogs, nil)},
		{name: "min_quorum", v: intValue(&a.MinQuorum, nil)},
		{name: "server_stabilization_time", v: durationValue(&a.ServerStabilizationTime)},
	}
}

func authFields(a *RepoAuth) []attrField {
	return []attrField{
		{name: "username", v: stringValue(&a.Username, nil)},
		{name: "password", v: stringValue(&a.Password, nil)},
		{name: "password_env", v: stringValue(&a.PasswordEnv, nil)},
		{name: "token", v: stringValue(&a.Token, nil)},
		{name: "token_env", v: stringValue(&a.TokenEnv, nil)},
		{name: "ssh_key_file", v: stringValue(&a.SSHKeyFile, nil)},
		{name: "ssh_key_passphrase", v: stringValue(&a.SSHKeyPassphrase, nil)},
		{name: "ssh_key_passphrase_env", v: stringValue(&a.SSHKeyPassphraseEnv, nil)},
		{name: "ssh_known_hosts_file", v: stringValue(&a.SSHKnownHostsFile, nil)},
		{name: "known_hosts_file", v: stringValue(&a.KnownHostsFile, nil)},
	}
}

func verifyFields(v *RepoVerify) []attrField {
	return []attrField{
		{name: "allowed_signers_file", v: stringValue(&v.AllowedSignersFile, nil)},
		{name: "gpg_keys_file", v: stringValue(&v.GPGKeysFile, nil)},
	}
}

// attrField is one attribute of a config file body.
type attrField struct {
	name string // attribute name
	key  string // top-level setting name, for origins; empty in blocks
	v    value
}

// decodeBody decodes body against a strict schema made of attrs and
// blocks: unknown attributes and blocks are errors. It decodes the
// attributes in source order and returns the content, for the caller to
// handle the blocks, and the attributes set by key.
func (l *loader) decodeBody(body hcl.Body, attrs []attrField, blocks []hcl.BlockHeaderSchema) (*hcl.BodyContent, map[string]*hcl.Attribute) {
	schema := &hcl.BodySchema{Blocks: blocks}
	byName := make(map[string]attrField, len(attrs))
	for _, a := range attrs {
		schema.Attributes = append(schema.Attributes, hcl.AttributeSchema{Name: a.name})
		byName[a.name] = a
	}
	content, diags := body.Content(schema)
	l.addDiags(diags)
	if content == nil {
		return nil, nil
	}

	list := make([]*hcl.Attribute, 0, len(content.Attributes))
	for _, attr := range content.Attributes {
		list = append(list, attr)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Range.Start.Byte < list[j].Range.Start.Byte })

	set := make(map[string]*hcl.Attribute)
	for _, attr := range list {
		a := byName[attr.Name]
		if err := a.v.decode(attr.Expr); err != nil {
			if a.key != "" {
				l.bad[a.key] = true
			}
			l.addDiags(hcl.Diagnostics{{
				Severity: hcl.DiagError,
				Summary:  fmt.Sprintf("Invalid value for %q", attr.Name),
				Detail:   err.Error(),
				Subject:  attr.Expr.Range().Ptr(),
			}})
			continue
		}
		if a.key != "" {
			set[a.key] = attr
		}
	}
	return content, set
}

func (l *loader) addDiags(diags hcl.Diagnostics) {
	for _, d := range diags {
		if d.Severity == hcl.DiagError {
			l.errs = append(l.errs, d)
		}
	}
}

// quotedSource is text a syntax error's detail quotes from the file; short
// quotes ("=", "{") are the parser's advice and stay.
var quotedSource = regexp.MustCompile(`"[^"]{3,}"`)

// withoutSource removes what the details of syntax errors quote from the
// file ("If you meant to define argument …"), which may be a secret typed
// without its quotes or equals sign. The summary, the advice and the
// position (file, line and column) still say where the problem is.
func withoutSource(diags hcl.Diagnostics) hcl.Diagnostics {
	out := make(hcl.Diagnostics, 0, len(diags))
	for _, d := range diags {
		c := *d
		c.Detail = quotedSource.ReplaceAllString(c.Detail, `"…"`)
		out = append(out, &c)
	}
	return out
}

func indexOf(n int, match func(int) bool) int {
	for i := 0; i < n; i++ {
		if match(i) {
			return i
		}
	}
	return -1
}
