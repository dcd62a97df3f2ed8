// Package tools checks the licences of the agents and tools the tests build.
//
// The Nomad and Consul agents that the integration tests run are built from
// the tool modules beside this file (scripts/tools/nomad, scripts/tools/consul),
// and so is the check of the monitoring files (scripts/tools/promcheck).
// The project builds and depends only on open-source software, and Nomad from
// v1.7.0 and Consul from v1.17.0 are under the Business Source License. The
// test here lists every module compiled into each agent and reads its licence:
// a module under the Business Source License, or one whose licence is not a
// recognised open-source licence, fails it, and Nomad's and Consul's own
// modules must be under the Mozilla Public License 2.0.
package tools

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// toolModules are the tool modules, the package each builds, and the
// fewest modules its build can list (fewer means the listing is wrong).
var toolModules = []struct {
	dir, pkg   string
	minModules int
}{
	{dir: "nomad", pkg: "github.com/hashicorp/nomad", minModules: 50},
	{dir: "consul", pkg: "github.com/hashicorp/consul", minModules: 50},
	// The monitoring check: Prometheus's rule and PromQL parsers.
	{dir: "promcheck", pkg: "github.com/nops-dev/nops/scripts/tools/promcheck", minModules: 10},
}

// openSourceLicences are phrases that identify an open-source licence text.
// The first that a licence file contains names it.
var openSourceLicences = []struct{ name, phrase string }{
	{"MPL-2.0", "Mozilla Public License"},
	{"Apache-2.0", "Apache License"},
	{"MIT", "Permission is hereby granted, free of charge"},
	{"BSD", "Redistribution and use in source and binary forms"},
	{"ISC", "Permission to use, copy, modify, and/or distribute this software for any"},
	{"ISC", "Permission to use, copy, modify, and distribute this software for any"},
	{"Unlicense", "This is free and unencumbered software released into the public domain"},
	{"CC0-1.0", "CC0 1.0 Universal"},
	{"LGPL", "GNU LESSER GENERAL PUBLIC LICENSE"},
	{"EPL", "Eclipse Public License"},
	{"BSL-1.0", "Boost Software License"},
	{"Zlib", "This software is provided 'as-is', without any express or implied"},
}

// readmeLicence matches a README's licence section that names its licence,
// for the rare module that ships no licence file.
var readmeLicence = regexp.MustCompile(`(?mi)^#+\s*licen[cs]e\s*$\s*^\s*(MIT|BSD|Apache|MPL|ISC)\b`)

// hashicorpAgents are the modules whose licence must be the MPL: the agents
// themselves and their submodules.
var hashicorpAgents = regexp.MustCompile(`^github\.com/hashicorp/(nomad|consul)(/|$)`)

func TestToolModules_OpenSourceLicences(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Fatalf("the go command is needed to list the tool modules: %v", err)
	}
	for _, tm := range toolModules {
		t.Run(tm.dir, func(t *testing.T) {
			mods := buildList(t, tm.dir, tm.pkg)
			if len(mods) < tm.minModules {
				t.Fatalf("only %d modules in the build of %s: the listing is wrong", len(mods), tm.pkg)
			}
			for _, m := range mods {
				if strings.HasPrefix(m.id, "github.com/nops-dev/nops/") {
					// The tool module itself: the project's own code,
					// under the project's licence.
					continue
				}
				name, err := licenceOf(m.dir)
				if err != nil {
					t.Errorf("%s: %v", m.id, err)
					continue
				}
				if hashicorpAgents.MatchString(m.id) && name != "MPL-2.0" {
					t.Errorf("%s: licence %s, want MPL-2.0", m.id, name)
				}
			}
		})
	}
}

func TestLicenceOf(t *testing.T) {
	cases := []struct {
		files map[string]string
		want  string // "" means an error
	}{
		{map[string]string{"LICENSE": "Mozilla Public License, version 2.0\n"}, "MPL-2.0"},
		{map[string]string{"LICENSE.txt": "Apache License\nVersion 2.0"}, "Apache-2.0"},
		{map[string]string{"COPYING": "Permission is hereby granted, free of charge, to any person"}, "MIT"},
		{map[string]string{"LICENSE": "Business Source License 1.1\n\nParameters\n\nLicensor: HashiCorp"}, ""},
		// A BUSL text that also mentions the MPL (as its change licence) is still BUSL.
		{map[string]string{"LICENSE": "Business Source License 1.1\nChange License: Mozilla Public License, version 2.0"}, ""},
		{map[string]string{"LICENSE": "All rights reserved."}, ""},
		{map[string]string{"Readme.md": "# spin\n\n# License\n\n MIT"}, "MIT"},
		{map[string]string{"main.go": "package main"}, ""},
	}
	for i, c := range cases {
		dir := t.TempDir()
		for name, text := range c.files {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := licenceOf(dir)
		switch {
		case c.want == "" && err == nil:
			t.Errorf("case %d: licence %s, want an error", i, got)
		case c.want != "" && (err != nil || got != c.want):
			t.Errorf("case %d: licence %q (%v), want %s", i, got, err, c.want)
		}
	}
}

type module struct{ id, dir string }

// buildList lists the modules whose packages are compiled into pkg, as the
// tool module in dir resolves them (replacements included).
func buildList(t *testing.T, dir, pkg string) []module {
	t.Helper()
	const format = `{{with .Module}}{{if .Replace}}{{.Replace.Path}}@{{.Replace.Version}}{{"\t"}}{{.Replace.Dir}}` +
		`{{else}}{{.Path}}@{{.Version}}{{"\t"}}{{.Dir}}{{end}}{{end}}`
	cmd := exec.Command("go", "list", "-mod=readonly", "-deps", "-f", format, pkg)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list in scripts/tools/%s (run `make bootstrap` first): %v\n%s", dir, err, stderr.String())
	}
	seen := map[string]bool{}
	var mods []module
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		id, modDir, ok := strings.Cut(sc.Text(), "\t")
		if !ok || seen[id] {
			continue
		}
		seen[id] = true
		if modDir == "" {
			t.Fatalf("%s is not in the module cache: run `make bootstrap` first", id)
		}
		mods = append(mods, module{id: id, dir: modDir})
	}
	return mods
}

// licenceOf names the open-source licence of the module in dir, from its
// licence file or, lacking one, its README's licence section.
func licenceOf(dir string) (string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", err
	}
	var readmes []string
	found := false
	for _, e := range entries {
		lower := strings.ToLower(e.Name())
		switch {
		case e.IsDir():
		case strings.HasPrefix(lower, "licen") || strings.HasPrefix(lower, "copying") || strings.HasPrefix(lower, "unlicense"):
			found = true
			text, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				return "", err
			}
			if bytes.Contains(text, []byte("Business Source License")) {
				return "", errBUSL(e.Name())
			}
			for _, l := range openSourceLicences {
				if bytes.Contains(text, []byte(l.phrase)) {
					return l.name, nil
				}
			}
		case strings.HasPrefix(lower, "readme"):
			readmes = append(readmes, e.Name())
		}
	}
	if !found {
		for _, name := range readmes {
			text, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				return "", err
			}
			if m := readmeLicence.FindSubmatch(text); m != nil {
				return string(m[1]), nil
			}
		}
		return "", errNoLicence
	}
	return "", errUnknownLicence
}

type licenceError string

func (e licenceError) Error() string { return string(e) }

const (
	errNoLicence      = licenceError("no licence file, and no licence named in its README")
	errUnknownLicence = licenceError("its licence file is not a recognised open-source licence")
)

func errBUSL(file string) error {
	return licenceError(file + " is the Business Source License, which is not an open-source licence")
}
