package validate

import (
	"fmt"
	"sort"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/hashicorp/nomad/api"
	"github.com/zclconf/go-cty/cty"
)

// literalJob parses a job file's HCL syntax and reads the literal values of
// its job block into a job, as far as the meta rules need it (ID,
// namespace, type, meta, the parameterized block). It returns the keys
// whose values are not literal (meta keys, "type", "parameterized.*"),
// syntax errors, each naming the file and the line, and a nil job when the
// file has no job block.
func literalJob(name string, src []byte) (*api.Job, []string, []string) {
	file, diags := hclsyntax.ParseConfig(src, name, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, nil, diagStrings(diags)
	}
	body, ok := file.Body.(*hclsyntax.Body)
	if !ok {
		return nil, nil, nil
	}
	block, problems := jobBlock(body)
	if block == nil {
		return nil, nil, problems
	}
	r := &literalReader{job: &api.Job{ID: ptr(block.Labels[0]), Namespace: ptr("default"), Type: ptr("service"), Meta: map[string]string{}}}
	r.readAttributes(block.Body)
	r.readBlocks(block.Body)
	r.readMetaAttribute(block.Body)
	sort.Strings(r.unresolved)
	return r.job, r.unresolved, nil
}

// jobBlock returns the one job block of a file's body, nil when it has
// none, or the problem of a second job block or of a job block without
// exactly one label.
func jobBlock(body *hclsyntax.Body) (*hclsyntax.Block, []string) {
	var block *hclsyntax.Block
	for _, b := range body.Blocks {
		if b.Type != "job" {
			continue
		}
		if block != nil {
			return nil, []string{fmt.Sprintf("%s: a file declares one job; another starts here", b.DefRange())}
		}
		block = b
	}
	if block == nil {
		return nil, nil
	}
	if len(block.Labels) != 1 {
		return nil, []string{fmt.Sprintf("%s: a job block has one label, its ID", block.DefRange())}
	}
	return block, nil
}

// literalReader fills a job from the literal values of its job block and
// lists the keys whose values are not literal.
type literalReader struct {
	job        *api.Job
	unresolved []string
}

// attr returns the literal string value of attribute name of b; a value
// that is not literal is listed as unresolved under key.
func (r *literalReader) attr(b *hclsyntax.Body, name, key string) (string, bool) {
	a, ok := b.Attributes[name]
	if !ok {
		return "", false
	}
	v, ok := literalString(a.Expr)
	if !ok {
		r.unresolved = append(r.unresolved, key)
	}
	return v, ok
}

// addMeta sets the meta key to the literal value of expr, or lists it as
// unresolved.
func (r *literalReader) addMeta(key string, expr hclsyntax.Expression) {
	if v, ok := literalString(expr); ok {
		r.job.Meta[key] = v
	} else {
		r.unresolved = append(r.unresolved, key)
	}
}

// readAttributes reads the namespace, type and id of the job block.
func (r *literalReader) readAttributes(body *hclsyntax.Body) {
	if v, ok := r.attr(body, "namespace", "namespace"); ok && v != "" {
		r.job.Namespace = &v
	}
	if v, ok := r.attr(body, "type", "type"); ok && v != "" {
		r.job.Type = &v
	}
	if v, ok := r.attr(body, "id", "id"); ok && v != "" {
		r.job.ID = &v
	}
}

// readBlocks reads the parameterized and meta blocks of the job block.
func (r *literalReader) readBlocks(body *hclsyntax.Body) {
	for _, b := range body.Blocks {
		switch b.Type {
		case "parameterized":
			r.readParameterized(b.Body)
		case "meta":
			for k, a := range b.Body.Attributes {
				r.addMeta(k, a.Expr)
			}
		}
	}
}

// readParameterized reads a parameterized block: its payload and the meta
// keys it requires.
func (r *literalReader) readParameterized(body *hclsyntax.Body) {
	pj := &api.ParameterizedJobConfig{}
	if v, ok := r.attr(body, "payload", "parameterized.payload"); ok {
		pj.Payload = v
	}
	if a, ok := body.Attributes["meta_required"]; ok {
		if list, ok := literalStrings(a.Expr); ok {
			pj.MetaRequired = list
		} else {
			r.unresolved = append(r.unresolved, "parameterized.meta_required")
		}
	}
	r.job.ParameterizedJob = pj
}

// readMetaAttribute reads a meta = { ... } attribute of the job block, whose
// keys override those of a meta block.
func (r *literalReader) readMetaAttribute(body *hclsyntax.Body) {
	a, ok := body.Attributes["meta"]
	if !ok {
		return
	}
	obj, ok := a.Expr.(*hclsyntax.ObjectConsExpr)
	if !ok {
		r.unresolved = append(r.unresolved, "meta")
		return
	}
	for _, item := range obj.Items {
		k, kd := item.KeyExpr.Value(nil)
		if kd.HasErrors() || !k.IsKnown() || k.IsNull() || k.Type() != cty.String {
			continue
		}
		r.addMeta(k.AsString(), item.ValueExpr)
	}
}

// literalStrings evaluates a list of literal strings.
func literalStrings(expr hclsyntax.Expression) ([]string, bool) {
	v, diags := expr.Value(nil)
	if diags.HasErrors() || !v.IsWhollyKnown() || v.IsNull() || !(v.Type().IsListType() || v.Type().IsTupleType()) {
		return nil, false
	}
	var out []string
	for it := v.ElementIterator(); it.Next(); {
		_, e := it.Element()
		if e.IsNull() || e.Type() != cty.String {
			return nil, false
		}
		out = append(out, e.AsString())
	}
	return out, true
}

// literalString evaluates an expression with no variables or functions, and
// returns its value when it is a known string (or a number or bool, as
// Nomad converts meta values).
func literalString(expr hclsyntax.Expression) (string, bool) {
	v, diags := expr.Value(nil)
	if diags.HasErrors() || !v.IsWhollyKnown() || v.IsNull() {
		return "", false
	}
	switch v.Type() {
	case cty.String:
		return v.AsString(), true
	case cty.Number:
		return v.AsBigFloat().Text('f', -1), true
	case cty.Bool:
		if v.True() {
			return "true", true
		}
		return "false", true
	}
	return "", false
}

// diagStrings returns the errors of diags, each naming the file and the
// line.
func diagStrings(diags hcl.Diagnostics) []string {
	var out []string
	for _, d := range diags {
		if d.Severity == hcl.DiagError {
			out = append(out, d.Error())
		}
	}
	return out
}
