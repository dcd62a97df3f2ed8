package config

import (
	"regexp"
	"strings"
	"testing"
)

// TestUsageListsEverySetting: `nops serve -h` names every top-level
// setting (flag and environment variable) and every block and attribute a
// config file accepts, so the help cannot drift from the settings again.
func TestUsageListsEverySetting(t *testing.T) {
	u := Usage()
	flatAll := strings.Join(strings.Fields(u), " ")
	for _, f := range Default().fields() {
		if !regexp.MustCompile(`(?m)^  -` + regexp.QuoteMeta(f.name) + `(=|$)`).MatchString(u) {
			t.Errorf("serve -h has no flag -%s", f.name)
		}
		if !strings.Contains(flatAll, "Env: "+f.envName()+".") {
			t.Errorf("serve -h does not name %s for -%s", f.envName(), f.name)
		}
	}
	_, blocks, ok := strings.Cut(u, "Config file blocks:")
	if !ok {
		t.Fatal("serve -h has no section of config file blocks")
	}
	// The help text of the blocks, on one line, so that a wrap falls
	// between words only.
	flat := strings.Join(strings.Fields(blocks), " ")
	var check func(b configBlock, in string)
	check = func(b configBlock, in string) {
		head := b.typ + " {"
		if b.label != "" {
			head = b.typ + ` "` + b.label + `" {`
		}
		at := strings.Index(in, head)
		if at < 0 {
			t.Errorf("serve -h does not show the %s block", b.typ)
			return
		}
		body := in[at+len(head):]
		for _, a := range b.attrs {
			if !regexp.MustCompile(`^[^}]*[ ,]` + regexp.QuoteMeta(a.name) + `[ ,]`).MatchString(body) {
				t.Errorf("serve -h does not list %s in the %s block", a.name, b.typ)
			}
		}
		for _, n := range b.nested {
			check(n, body)
		}
	}
	for _, b := range configBlocks() {
		check(b, flat)
	}
	// What the issue found missing.
	for _, want := range []string{"retention {", "autopilot {", "smtp_addr", "require_tls", "approval {", "min_quorum"} {
		if !strings.Contains(flat, want) {
			t.Errorf("serve -h does not show %q", want)
		}
	}
}

// TestConfigBlocksAreTheLoadersSchema: every attribute the help lists
// for a block is one the loader accepts there (a null value may be
// refused, an unknown attribute is a different error), and one it does
// not list is refused as unsupported.
func TestConfigBlocksAreTheLoadersSchema(t *testing.T) {
	open := func(b configBlock) string {
		if b.label != "" {
			return b.typ + " \"x\" {\n"
		}
		return b.typ + " {\n"
	}
	for _, b := range configBlocks() {
		paths := [][]configBlock{{b}}
		for _, n := range b.nested {
			paths = append(paths, []configBlock{b, n})
		}
		for _, path := range paths {
			last := path[len(path)-1]
			for _, a := range append(last.attrs, attrField{name: "no_such_attribute"}) {
				content := ""
				for _, p := range path {
					content += open(p)
				}
				content += a.name + " = null\n" + strings.Repeat("}\n", len(path))
				_, err := Load(args("-config", writeFile(t, "c.hcl", content)), nil)
				unsupported := err != nil && strings.Contains(err.Error(), "Unsupported")
				if want := a.name == "no_such_attribute"; unsupported != want {
					t.Errorf("%s: unsupported %v, want %v (%v)", strings.TrimSpace(content), unsupported, want, err)
				}
			}
		}
	}
}
