package config

import (
	"fmt"
	"strings"
	"time"
)

// Usage returns the help text of `nops serve`.
func Usage() string {
	var b strings.Builder
	b.WriteString(`Usage: nops serve [options]

  Runs a Nops server. Servers form a Raft cluster that watches git
  repositories and deploys the Nomad jobs in them.

  Every option can also be set with the environment variable shown, or in
  a config file by its name with underscores (data_dir = "/var/lib/nops").
  A flag wins over the environment, the environment over config files, and
  a later config file over an earlier one.

Options:

  -config=<path>
    Config file (HCL, or JSON when it ends in .json) or directory of them.
    Repeatable; loaded in order. Env: NOPS_CONFIG (comma-separated).

  -repo=<url#branch:path>
    Git repository to watch, named repo, repo-2... Repeatable. Branch
    defaults to main and path to "."; more repositories and credentials go
    in repository blocks of a config file. Env: NOPS_REPO (comma-separated).

  -validate
    Check the configuration, read its TLS certificate, key and CA files,
    print a summary and exit (0 when the server would start with it)
    without starting a server. Command line only.

`)
	def := Default()
	for _, f := range def.fields() {
		arg := "=" + placeholder(f)
		if f.v.isBool() {
			arg = ""
		}
		fmt.Fprintf(&b, "  -%s%s\n", f.name, arg)
		text := f.usage
		d := f.defText
		if d == "" && !f.v.isBool() {
			d = f.v.String()
		}
		if d != "" {
			text += " Default: " + d + "."
		}
		text += " Env: " + f.envName() + "."
		for _, line := range wrap(text, usageWidth) {
			fmt.Fprintf(&b, "    %s\n", line)
		}
		b.WriteString("\n")
	}
	b.WriteString("Config file blocks:\n\n")
	for _, cb := range configBlocks() {
		writeBlock(&b, cb, "  ")
	}
	return b.String()
}

// writeBlock writes the help of a config file block: its type, label,
// attributes and nested blocks, wrapped under indent.
func writeBlock(b *strings.Builder, cb configBlock, indent string) {
	for i, line := range wrap(blockText(cb), usageWidth+2-len(indent)) {
		if i > 0 {
			line = "    " + line
		}
		fmt.Fprintf(b, "%s%s\n", indent, line)
	}
	if cb.note != "" {
		for _, line := range wrap("("+cb.note+")", usageWidth-2-len(indent)) {
			fmt.Fprintf(b, "%s    %s\n", indent, line)
		}
	}
}

// blockText is a block as help shows it: type "label" { attr, ..., nested { ... } }.
func blockText(cb configBlock) string {
	head := cb.typ
	if cb.label != "" {
		head += fmt.Sprintf(" %q", cb.label)
	}
	names := make([]string, 0, len(cb.attrs)+len(cb.nested))
	for _, a := range cb.attrs {
		names = append(names, a.name)
	}
	for _, n := range cb.nested {
		names = append(names, blockText(n))
	}
	return head + " { " + strings.Join(names, ", ") + " }"
}

// placeholder names the argument of a flag in help text.
func placeholder(f field) string {
	switch {
	case f.name == "data-dir":
		return "<path>"
	case f.name == "bind" || f.name == "advertise":
		return "<ip>"
	case f.name == "encrypt":
		return "<key>"
	case f.name == "region":
		return "<name>"
	case f.name == "nomad-addr":
		return "<url>"
	case strings.HasSuffix(f.name, "-port"):
		return "<port>"
	case f.name == "retry-join":
		return "<host:port>"
	}
	switch f.v.(type) {
	case *typed[time.Duration]:
		return "<duration>"
	case *typed[[]string]:
		return "<a,b,...>"
	case *typed[int], *typed[uint64]:
		return "<n>"
	}
	return "<string>"
}

// usageWidth is the width of a flag's usage text: with its indent, a line
// fits an 80-column terminal.
const usageWidth = 72

// wrap splits text into lines of at most width characters, at spaces.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, w := range strings.Fields(text) {
		if line != "" && len(line)+1+len(w) > width {
			lines = append(lines, line)
			line = ""
		}
		if line != "" {
			line += " "
		}
		line += w
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}
