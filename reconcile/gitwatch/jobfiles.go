package gitwatch

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// The job-file rule (SPEC section 1): which files of a repository are job
// files, and which variables file goes with each. It has one owner, this
// file: a server's snapshots (readJobFiles) and `nops validate` (ReadDir)
// both select files with SelectJobFiles.

// Job file name suffixes, and the suffix of a job's variables file.
const (
	jobSuffixHCL = ".nomad.hcl"
	jobSuffix    = ".nomad"
	varsSuffix   = ".vars.hcl"
)

// IsJobFile reports whether a file name is a job file: *.nomad.hcl or
// *.nomad, with a non-empty name before the suffix.
func IsJobFile(name string) bool {
	base := path.Base(name)
	return (strings.HasSuffix(base, jobSuffixHCL) && len(base) > len(jobSuffixHCL)) ||
		(strings.HasSuffix(base, jobSuffix) && len(base) > len(jobSuffix))
}

func isVarsFile(name string) bool { return strings.HasSuffix(name, varsSuffix) }

// VarsPathFor returns the path of the variables file that belongs to a job
// file: web.nomad.hcl and web.nomad both pair with web.vars.hcl.
func VarsPathFor(jobPath string) string {
	dir, base := path.Split(jobPath)
	switch {
	case strings.HasSuffix(base, jobSuffixHCL):
		base = strings.TrimSuffix(base, jobSuffixHCL)
	case strings.HasSuffix(base, jobSuffix):
		base = strings.TrimSuffix(base, jobSuffix)
	}
	return dir + base + varsSuffix
}

// SelectJobFiles applies the job-file rule to the regular files of a tree,
// given as slash-separated paths relative to the repository root: it
// returns the job files at any depth under dir ("" for the whole tree),
// sorted by path, each with VarsPath set when its variables file is among
// paths. Hidden directories are not special. Content and Vars are left
// empty.
func SelectJobFiles(paths []string, dir string) []JobFile {
	prefix := ""
	if dir != "" {
		prefix = strings.TrimSuffix(dir, "/") + "/"
	}
	present := map[string]bool{}
	var jobs []string
	for _, p := range paths {
		if !strings.HasPrefix(p, prefix) {
			continue
		}
		present[p] = true
		if IsJobFile(p) {
			jobs = append(jobs, p)
		}
	}
	sort.Strings(jobs)
	out := make([]JobFile, 0, len(jobs))
	for _, p := range jobs {
		jf := JobFile{Path: p}
		if vp := VarsPathFor(p); vp != p && present[vp] {
			jf.VarsPath = vp
		}
		out = append(out, jf)
	}
	return out
}

// ReadDir reads the job files of a checked-out directory as a server's
// snapshot of that commit would hold them, with root as the repository
// path: paths are relative to root and slash-separated. Like a git tree, it
// holds regular files only (symbolic links are not followed) and nothing of
// a .git directory or of a nested repository or submodule.
func ReadDir(root string) ([]JobFile, error) {
	info, err := os.Stat(root)
	if err != nil {
		return nil, fmt.Errorf("read job files: %w", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("read job files: %s is not a directory", root)
	}
	var paths []string
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".git" {
				return filepath.SkipDir
			}
			if p != root {
				nested, err := isNestedRepo(p)
				if err != nil {
					return err
				}
				if nested {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !d.Type().IsRegular() || (!IsJobFile(d.Name()) && !isVarsFile(d.Name())) {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		paths = append(paths, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read job files under %s: %w", root, err)
	}
	contents := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(p)))
		if err != nil {
			return nil, fmt.Errorf("read job files: %w", err)
		}
		contents[p] = string(b)
	}
	return withContents(SelectJobFiles(paths, ""), contents), nil
}

// isNestedRepo reports whether dir is the work tree of another repository
// (a submodule's .git is a file, a nested clone's a directory with a HEAD),
// which git records as a link to a commit rather than as files.
func isNestedRepo(dir string) (bool, error) {
	info, err := os.Lstat(filepath.Join(dir, ".git"))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if !info.IsDir() {
		return info.Mode().IsRegular(), nil
	}
	if _, err := os.Lstat(filepath.Join(dir, ".git", "HEAD")); err == nil {
		return true, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return false, nil
}

// withContents fills in the contents of selected job files.
func withContents(files []JobFile, contents map[string]string) []JobFile {
	for i := range files {
		files[i].Content = contents[files[i].Path]
		if files[i].VarsPath != "" {
			files[i].Vars = contents[files[i].VarsPath]
		}
		files[i].hash = files[i].contentHash()
	}
	return files
}

func mapKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
