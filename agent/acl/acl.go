// Package acl parses ACL policies and answers, for a token's set of
// policies, whether it holds a capability on the cluster or on a job.
//
// A policy is HCL (or the same in JSON):
//
//	cluster {
//	  capabilities = ["read", "windows", "operator"]
//	}
//	namespace "web-*" {
//	  capabilities = ["read"]          # every job of the namespaces
//	  job "api-*" {
//	    capabilities = ["approve", "deploy"]
//	    deny         = ["pause"]
//	  }
//	}
//	cluster "eu-*" {                   # Nomad clusters (SPEC section 16)
//	  namespace "*" {
//	    capabilities = ["read", "pause"]
//	  }
//	}
//
// The unlabeled cluster block grants capabilities on the Nops cluster
// itself (operator, windows, ...). A labeled cluster block scopes the
// namespace blocks it holds to the Nomad clusters its label matches; a
// namespace block at the top level applies to the jobs of every Nomad
// cluster.
//
// Nomad cluster, namespace and job names are globs of the one dialect,
// structs.Glob: "*" matches any run of characters. Capabilities granted by every block that matches (across
// every policy of the token) add up; a capability listed in a matching
// block's deny list, or the capability "deny" (which denies everything),
// wins over any grant.
//
// Guarantee: an ACL is immutable once compiled and safe for concurrent use;
// a check allocates nothing.
package acl

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"

	"github.com/nops-dev/nops/structs"
)

// Capability is one right, or a set of them as a bit mask.
type Capability uint16

// The capabilities.
const (
	Read Capability = 1 << iota
	Approve
	Deploy
	Pause
	Windows
	Operator
	ACLWrite
	// all is every capability; "deny" denies all of them.
	all = Read | Approve | Deploy | Pause | Windows | Operator | ACLWrite
)

var capabilityNames = []struct {
	name string
	c    Capability
}{
	{"read", Read}, {"approve", Approve}, {"deploy", Deploy}, {"pause", Pause},
	{"windows", Windows}, {"operator", Operator}, {"acl", ACLWrite},
}

func (c Capability) String() string {
	var names []string
	for _, n := range capabilityNames {
		if c&n.c != 0 {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}

// ErrInvalidPolicy wraps every problem of a policy's rules.
var ErrInvalidPolicy = errors.New("invalid ACL policy")

// namespaceCaps and clusterCaps are what each kind of block may grant.
const (
	namespaceCaps = Read | Approve | Deploy | Pause
	clusterCaps   = Read | Deploy | Pause | Windows | Operator | ACLWrite
)

// Policy is a parsed policy.
type Policy struct {
	// Cluster is the unlabeled cluster block: capabilities on the Nops
	// cluster itself.
	Cluster *Block
	// Namespaces are the top-level namespace blocks: they apply to the
	// jobs of every Nomad cluster.
	Namespaces []*NamespaceBlock
	// Clusters are the labeled cluster blocks: namespace blocks that apply
	// to the jobs of the Nomad clusters their glob matches.
	Clusters []*ClusterBlock
}

// ClusterBlock scopes namespace blocks to the Nomad clusters matching
// Glob.
type ClusterBlock struct {
	Glob       string
	Namespaces []*NamespaceBlock
}

// Block is a set of granted and denied capabilities.
type Block struct {
	Grant, Deny Capability
}

// NamespaceBlock grants capabilities on the jobs of matching namespaces.
type NamespaceBlock struct {
	Glob string
	Block
	Jobs []*JobBlock
}

// JobBlock grants capabilities on matching jobs of its namespaces.
type JobBlock struct {
	Glob string
	Block
}

// rawBlock is a block as read from the rules, before checks: a
// namespace's jobs, or a labeled cluster's namespaces, in children.
type rawBlock struct {
	name         string
	capabilities []string
	deny         []string
	children     []rawBlock
}

var (
	policySchema = &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
		{Type: "cluster"}, {Type: "namespace", LabelNames: []string{"name"}},
	}}
	// labeledClusterSchema reads the labeled cluster blocks, which the
	// parser sets apart from the rest (splitLabeledClusters).
	labeledClusterSchema = &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
		{Type: "cluster", LabelNames: []string{"name"}},
	}}
	clusterScopeSchema = &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{
		{Type: "namespace", LabelNames: []string{"name"}},
	}}
	namespaceSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "capabilities"}, {Name: "deny"}},
		Blocks:     []hcl.BlockHeaderSchema{{Type: "job", LabelNames: []string{"name"}}},
	}
	capsSchema = &hcl.BodySchema{Attributes: []hcl.AttributeSchema{{Name: "capabilities"}, {Name: "deny"}}}
)

// decodeBlock reads the attributes (and job blocks) of one block.
func decodeBlock(body hcl.Body, schema *hcl.BodySchema, name string) (rawBlock, hcl.Diagnostics) {
	child := capsSchema
	if schema == clusterScopeSchema {
		child = namespaceSchema
	}
	out := rawBlock{name: name}
	content, diags := body.Content(schema)
	for attr, dst := range map[string]*[]string{"capabilities": &out.capabilities, "deny": &out.deny} {
		a, ok := content.Attributes[attr]
		if !ok {
			continue
		}
		v, d := a.Expr.Value(nil)
		diags = append(diags, d...)
		if d.HasErrors() {
			continue
		}
		if !v.Type().IsTupleType() && !v.Type().IsListType() {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: attr + " must be a list of strings", Subject: a.Range.Ptr()})
			continue
		}
		for it := v.ElementIterator(); it.Next(); {
			_, e := it.Element()
			if e.IsNull() || !e.IsKnown() || e.Type() != cty.String {
				diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: attr + " must be a list of strings", Subject: a.Range.Ptr()})
				break
			}
			*dst = append(*dst, e.AsString())
		}
	}
	for _, b := range content.Blocks {
		j, d := decodeBlock(b.Body, child, b.Labels[0])
		diags = append(diags, d...)
		out.children = append(out.children, j)
	}
	return out, diags
}

// maxRules bounds the size of a policy's rules: 64 KiB holds hundreds of
// namespace and job blocks, far more than a hand-written policy needs, and
// keeps one policy from making every token's compile slow.
const maxRules = 64 << 10

// Parse parses rules in HCL, or in JSON when they start with "{". Every
// problem is listed in the error, which wraps ErrInvalidPolicy.
func Parse(rules string) (*Policy, error) {
	if len(rules) > maxRules {
		return nil, fmt.Errorf("%w: rules are %d bytes, over the limit of %d", ErrInvalidPolicy, len(rules), maxRules)
	}
	if strings.TrimSpace(rules) == "" {
		return nil, fmt.Errorf("%w: rules are empty", ErrInvalidPolicy)
	}
	clusters, namespaces, scopes, err := parseBlocks(rules)
	if err != nil {
		return nil, err
	}
	var pb policyBuilder
	out := &Policy{}
	if len(clusters) > 1 {
		pb.problems = append(pb.problems, "more than one cluster block")
	}
	for _, c := range clusters {
		b := pb.caps("cluster", clusterCaps, c.capabilities, c.deny)
		out.Cluster = &b
	}
	for _, ns := range namespaces {
		out.Namespaces = append(out.Namespaces, pb.namespace("", ns))
	}
	for _, sc := range scopes {
		out.Clusters = append(out.Clusters, pb.clusterScope(sc))
	}
	if len(pb.problems) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrInvalidPolicy, strings.Join(pb.problems, "; "))
	}
	return out, nil
}

// parseBlocks parses the rules, as HCL or as JSON when they start with
// "{", into their unlabeled cluster blocks, top-level namespace blocks and
// labeled cluster blocks (scopes).
func parseBlocks(rules string) (clusters, namespaces, scopes []rawBlock, err error) {
	body, labeled, diags := splitLabeledClusters(rules)
	if diags.HasErrors() {
		return nil, nil, nil, fmt.Errorf("%w: %s", ErrInvalidPolicy, diags.Error())
	}
	if labeled != nil {
		lc, d := labeled.Content(labeledClusterSchema)
		diags = append(diags, d...)
		for _, b := range lc.Blocks {
			sc, d := decodeBlock(b.Body, clusterScopeSchema, b.Labels[0])
			diags = append(diags, d...)
			scopes = append(scopes, sc)
		}
	}
	content, d := body.Content(policySchema)
	diags = append(diags, d...)
	for _, b := range content.Blocks {
		if b.Type == "cluster" {
			c, d := decodeBlock(b.Body, capsSchema, "")
			diags = append(diags, d...)
			clusters = append(clusters, c)
			continue
		}
		ns, d := decodeBlock(b.Body, namespaceSchema, b.Labels[0])
		diags = append(diags, d...)
		namespaces = append(namespaces, ns)
	}
	if diags.HasErrors() {
		return nil, nil, nil, fmt.Errorf("%w: %s", ErrInvalidPolicy, diags.Error())
	}
	return clusters, namespaces, scopes, nil
}

// splitLabeledClusters parses the rules and sets the labeled cluster
// blocks (labeled, nil when there are none) apart from the rest (body): a
// schema cannot declare one block type both with and without a label.
// In HCL the label tells them apart; in JSON, where labels are object
// keys, a cluster object whose keys are all attributes of the unlabeled
// block (capabilities, deny) is that block, any other holds labeled ones.
func splitLabeledClusters(rules string) (body, labeled hcl.Body, diags hcl.Diagnostics) {
	p := hclparse.NewParser()
	if !strings.HasPrefix(strings.TrimSpace(rules), "{") {
		f, diags := p.ParseHCL([]byte(rules), "rules.hcl")
		if diags.HasErrors() {
			return nil, nil, diags
		}
		syn, ok := f.Body.(*hclsyntax.Body)
		if !ok {
			return f.Body, nil, nil
		}
		rest := *syn
		rest.Blocks = nil
		scoped := &hclsyntax.Body{SrcRange: syn.SrcRange, EndRange: syn.EndRange}
		for _, b := range syn.Blocks {
			if b.Type == "cluster" && len(b.Labels) > 0 {
				scoped.Blocks = append(scoped.Blocks, b)
			} else {
				rest.Blocks = append(rest.Blocks, b)
			}
		}
		if len(scoped.Blocks) == 0 {
			return &rest, nil, nil
		}
		return &rest, scoped, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(rules), &top); err != nil {
		// The HCL JSON parser names the problem with its position.
		f, diags := p.ParseJSON([]byte(rules), "rules.json")
		if !diags.HasErrors() {
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: err.Error()})
		}
		return f.Body, nil, diags
	}
	raw, ok := top["cluster"]
	if !ok {
		f, diags := p.ParseJSON([]byte(rules), "rules.json")
		return f.Body, nil, diags
	}
	elems := []json.RawMessage{raw}
	if strings.HasPrefix(strings.TrimSpace(string(raw)), "[") {
		elems = nil
		if err := json.Unmarshal(raw, &elems); err != nil {
			return nil, nil, hcl.Diagnostics{{Severity: hcl.DiagError, Summary: "cluster: " + err.Error()}}
		}
	}
	var plain, scoped []json.RawMessage
	for _, e := range elems {
		var keys map[string]json.RawMessage
		if json.Unmarshal(e, &keys) == nil && !onlyCapsKeys(keys) {
			scoped = append(scoped, e)
		} else {
			plain = append(plain, e)
		}
	}
	if len(scoped) == 0 {
		f, diags := p.ParseJSON([]byte(rules), "rules.json")
		return f.Body, nil, diags
	}
	if len(plain) == 0 {
		delete(top, "cluster")
	} else {
		top["cluster"], _ = json.Marshal(plain)
	}
	rest, _ := json.Marshal(top)
	scopedDoc, _ := json.Marshal(map[string]any{"cluster": scoped})
	f, d := p.ParseJSON(rest, "rules.json")
	diags = append(diags, d...)
	s, d := p.ParseJSON(scopedDoc, "rules-clusters.json")
	diags = append(diags, d...)
	if diags.HasErrors() {
		return nil, nil, diags
	}
	return f.Body, s.Body, nil
}

// onlyCapsKeys reports whether a JSON cluster object holds only the
// attributes of the unlabeled cluster block.
func onlyCapsKeys(keys map[string]json.RawMessage) bool {
	for k := range keys {
		if k != "capabilities" && k != "deny" {
			return false
		}
	}
	return true
}

// policyBuilder turns parsed blocks into a policy's blocks and collects
// every problem it finds, so that one error names them all.
type policyBuilder struct {
	problems []string
}

// caps resolves the capability names granted and denied at where; a
// capability not allowed there, or unknown, is a problem.
func (pb *policyBuilder) caps(where string, allowed Capability, grant, deny []string) Block {
	var b Block
	for _, n := range grant {
		if n == "deny" {
			b.Deny |= all
			continue
		}
		c, ok := lookup(n)
		switch {
		case !ok:
			pb.problems = append(pb.problems, fmt.Sprintf("%s: unknown capability %q", where, n))
		case c&allowed == 0:
			pb.problems = append(pb.problems, fmt.Sprintf("%s: capability %q cannot be granted here (allowed: %s)", where, n, allowed))
		default:
			b.Grant |= c
		}
	}
	for _, n := range deny {
		c, ok := lookup(n)
		if !ok {
			pb.problems = append(pb.problems, fmt.Sprintf("%s: unknown capability %q in deny", where, n))
			continue
		}
		b.Deny |= c
	}
	return b
}

// clusterScope builds a labeled cluster block and its namespace blocks;
// a bad glob is a problem.
func (pb *policyBuilder) clusterScope(sc rawBlock) *ClusterBlock {
	where := fmt.Sprintf("cluster %q", sc.name)
	if err := structs.CheckGlob(sc.name); err != nil {
		pb.problems = append(pb.problems, fmt.Sprintf("%s: %v", where, err))
	}
	cb := &ClusterBlock{Glob: sc.name}
	for _, ns := range sc.children {
		cb.Namespaces = append(cb.Namespaces, pb.namespace(where+" ", ns))
	}
	return cb
}

// namespace builds a namespace block and its job blocks; a bad glob is a
// problem. prefix names the labeled cluster block that holds it, if any.
func (pb *policyBuilder) namespace(prefix string, ns rawBlock) *NamespaceBlock {
	where := fmt.Sprintf("%snamespace %q", prefix, ns.name)
	if err := structs.CheckGlob(ns.name); err != nil {
		pb.problems = append(pb.problems, fmt.Sprintf("%s: %v", where, err))
	}
	nb := &NamespaceBlock{Glob: ns.name, Block: pb.caps(where, namespaceCaps, ns.capabilities, ns.deny)}
	for _, j := range ns.children {
		jw := fmt.Sprintf("%s job %q", where, j.name)
		if err := structs.CheckGlob(j.name); err != nil {
			pb.problems = append(pb.problems, fmt.Sprintf("%s: %v", jw, err))
		}
		nb.Jobs = append(nb.Jobs, &JobBlock{Glob: j.name, Block: pb.caps(jw, namespaceCaps, j.capabilities, j.deny)})
	}
	return nb
}

func lookup(name string) (Capability, bool) {
	for _, n := range capabilityNames {
		if n.name == name {
			return n.c, true
		}
	}
	return 0, false
}

// rule is a compiled grant on a (Nomad cluster glob, namespace glob, job
// glob) triple; an empty job glob is the namespace block itself (every
// job). A top-level namespace block's cluster glob is "*".
type rule struct {
	cluster, ns, job string
	Block
}

// ACL is the compiled union of a token's policies.
type ACL struct {
	management bool
	cluster    Block
	rules      []rule
}

// Management is the ACL of a management token: everything is allowed.
var management = &ACL{management: true}

// ManagementACL returns the ACL of a management token.
func ManagementACL() *ACL { return management }

// Compile merges policies into one ACL. Blocks with the same globs are
// merged, so the cost of a check grows with the number of distinct globs,
// not with the number of policies.
func Compile(policies []*Policy) *ACL {
	a := &ACL{}
	idx := map[[3]string]int{}
	add := func(cluster, ns, job string, b Block) {
		k := [3]string{cluster, ns, job}
		i, ok := idx[k]
		if !ok {
			i = len(a.rules)
			idx[k] = i
			a.rules = append(a.rules, rule{cluster: cluster, ns: ns, job: job})
		}
		a.rules[i].Grant |= b.Grant
		a.rules[i].Deny |= b.Deny
	}
	for _, p := range policies {
		if p == nil {
			continue
		}
		if p.Cluster != nil {
			a.cluster.Grant |= p.Cluster.Grant
			a.cluster.Deny |= p.Cluster.Deny
		}
		addNamespaces := func(cluster string, namespaces []*NamespaceBlock) {
			for _, ns := range namespaces {
				add(cluster, ns.Glob, "", ns.Block)
				for _, j := range ns.Jobs {
					add(cluster, ns.Glob, j.Glob, j.Block)
				}
			}
		}
		addNamespaces("*", p.Namespaces)
		for _, c := range p.Clusters {
			addNamespaces(c.Glob, c.Namespaces)
		}
	}
	// A fixed order, so that the compiled ACL does not depend on the order
	// of the policies.
	sort.SliceStable(a.rules, func(i, j int) bool {
		ri, rj := &a.rules[i], &a.rules[j]
		return ri.cluster+"\x00"+ri.ns+"\x00"+ri.job < rj.cluster+"\x00"+rj.ns+"\x00"+rj.job
	})
	return a
}

// IsManagement reports whether the ACL allows everything.
func (a *ACL) IsManagement() bool { return a != nil && a.management }

// AllowCluster reports whether the ACL holds c on the cluster.
func (a *ACL) AllowCluster(c Capability) bool {
	if a == nil {
		return false
	}
	if a.management {
		return true
	}
	return a.cluster.Grant&c == c && a.cluster.Deny&c == 0
}

// AllowJob reports whether the ACL holds c on the job of a namespace of
// a Nomad cluster ("" is the default cluster).
func (a *ACL) AllowJob(cluster, namespace, job string, c Capability) bool {
	if a == nil {
		return false
	}
	if a.management {
		return true
	}
	cluster = structs.ClusterName(cluster)
	var grant, deny Capability
	for i := range a.rules {
		r := &a.rules[i]
		if !structs.Glob(r.cluster, cluster) || !structs.Glob(r.ns, namespace) {
			continue
		}
		if r.job != "" && !structs.Glob(r.job, job) {
			continue
		}
		grant |= r.Grant
		deny |= r.Deny
	}
	return grant&c == c && deny&c == 0
}

// AllowAnyJob reports whether the ACL could hold c on some job: a
// namespace or job block grants it. Routes that name no job yet (lists)
// use it to tell "may see some" from "may see none".
func (a *ACL) AllowAnyJob(c Capability) bool {
	if a == nil {
		return false
	}
	if a.management {
		return true
	}
	for i := range a.rules {
		if a.rules[i].Grant&c == c {
			return true
		}
	}
	return false
}
