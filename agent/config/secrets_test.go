package config

import (
	"strings"
	"testing"
)

// TestErrorsHideRepositoryCredentials: an error about a repository URL
// does not print the token or password it carries.
func TestErrorsHideRepositoryCredentials(t *testing.T) {
	for _, spec := range []string{"https://ghp_SECRET1@github.com/o/r#main:", "https://u:SECRET1@git.example/x#:", "u:SECRET1@git.example:o/r#main:"} {
		_, err := ParseRepoSpec("r", spec)
		if err == nil || strings.Contains(err.Error(), "SECRET1") {
			t.Errorf("ParseRepoSpec(%q): %v", spec, err)
		}
	}
	if err := checkRepoURL("https://ghp_SECRET1@github.com/o r"); err == nil || strings.Contains(err.Error(), "SECRET1") {
		t.Errorf("checkRepoURL: %v", err)
	}
}
