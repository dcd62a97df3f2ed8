package main

import (
	"debug/elf"
	"fmt"
	"strings"
)

// platform is an OS and CPU architecture the image is built for.
type platform struct{ os, arch string }

func (p platform) String() string { return p.os + "/" + p.arch }

// elfMachines are the platforms the image is built for and the ELF machine
// of each one's binaries.
var elfMachines = map[platform]elf.Machine{
	{"linux", "amd64"}: elf.EM_X86_64,
	{"linux", "arm64"}: elf.EM_AARCH64,
}

func parsePlatform(s string) (platform, error) {
	osName, arch, ok := strings.Cut(s, "/")
	p := platform{os: osName, arch: arch}
	if _, known := elfMachines[p]; !ok || !known {
		return platform{}, fmt.Errorf("platform %q: want linux/amd64 or linux/arm64", s)
	}
	return p, nil
}

// checkBinary makes sure the file at path is a static Linux executable
// for p: an image from scratch has no dynamic loader or C library, so a
// binary built with cgo would not start in it.
func checkBinary(path string, p platform) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("binary for %s: %s: %w", p, path, err)
	}
	defer f.Close()
	if want := elfMachines[p]; f.Machine != want {
		return fmt.Errorf("binary for %s: %s is built for %s, want %s", p, path, f.Machine, want)
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return fmt.Errorf("binary for %s: %s is an ELF %s, not an executable", p, path, f.Type)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			return fmt.Errorf("binary for %s: %s is dynamically linked (it needs a loader, which an image from scratch lacks): build it with CGO_ENABLED=0", p, path)
		}
	}
	return nil
}
