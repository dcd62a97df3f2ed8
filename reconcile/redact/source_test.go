package redact_test

import (
	"strings"
	"testing"

	"github.com/nops-dev/nops/reconcile/redact"
)

// TestSource_RedactsSecretsOfAJobFile: each case is a file's text, what
// the redacted text must equal, and the secrets that must not be left in
// it. Every result keeps the lines of its input.
func TestSource_RedactsSecretsOfAJobFile(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		secrets        []string
	}{
		{
			name:    "env entry",
			in:      "    env {\n      DB_PASSWORD = \"hunter2\"\n      PORT        = \"8080\"\n    }",
			want:    "    env {\n      DB_PASSWORD = \"(redacted)\"\n      PORT        = \"8080\"\n    }",
			secrets: []string{"hunter2"},
		},
		{
			name:    "meta and a vars file",
			in:      "api_token = \"tok-123\"\nimage_tag = \"v2\"\ndb_dsn = \"postgres://u:pw@db/app\"",
			want:    "api_token = \"(redacted)\"\nimage_tag = \"v2\"\ndb_dsn = \"(redacted)\"",
			secrets: []string{"tok-123", "pw@"},
		},
		{
			name:    "secret value of a call over several lines",
			in:      "env {\n  DB_CREDENTIALS = jsonencode({\n    pw = \"hunter2\"\n  })\n  PORT = \"8080\"\n}",
			want:    "env {\n  DB_CREDENTIALS = \"(redacted)\"\n    pw = \"(redacted)\"\n  })\n  PORT = \"8080\"\n}",
			secrets: []string{"hunter2"},
		},
		{
			name:    "secret value in parentheses over several lines",
			in:      "API_TOKEN = trimspace(\n  \"s3cr3t\"\n)\nNAME = \"web\"",
			want:    "API_TOKEN = \"(redacted)\"\n  \"(redacted)\"\n)\nNAME = \"web\"",
			secrets: []string{"s3cr3t"},
		},
		{
			name:    "secret string whose interpolation spans lines",
			in:      "DB_PASSWORD = \"${join(\"\", [\n  \"hun\", \"ter2\",\n])}\"\nNAME = \"web\"",
			want:    "DB_PASSWORD = \"(redacted)\"\n  \"(redacted)\",\n])}\"\nNAME = \"web\"",
			secrets: []string{"hun", "ter2"},
		},
		{
			name:    "empty value stays",
			in:      `SECRET_KEY = ""`,
			want:    `SECRET_KEY = ""`,
			secrets: nil,
		},
		{
			name:    "one-line block",
			in:      `env { DB_PASSWORD = "hunter2", USER = "app" }`,
			want:    `env { DB_PASSWORD = "(redacted)", USER = "app" }`,
			secrets: []string{"hunter2"},
		},
		{
			name:    "json job",
			in:      "  \"Env\": {\n    \"DB_PASSWORD\": \"hunter2\",\n    \"A\": \"b\"\n  },\n  \"EmbeddedTmpl\": \"{{ with secret \\\"x\\\" }}{{ .Data.pw }}{{ end }}\",",
			want:    "  \"Env\": {\n    \"DB_PASSWORD\": \"(redacted)\",\n    \"A\": \"b\"\n  },\n  \"EmbeddedTmpl\": \"(redacted)\",",
			secrets: []string{"hunter2", ".Data.pw"},
		},
		{
			name:    "inline json",
			in:      `{"Env": {"API_TOKEN": "t0k\"en", "A": "b"}}`,
			want:    `{"Env": {"API_TOKEN": "(redacted)", "A": "b"}}`,
			secrets: []string{"t0k"},
		},
		{
			name:    "template heredoc",
			in:      "template {\n  data = <<EOF\npassword={{ key \"db/pw\" }}\n  plain line\n\nEOF\n  destination = \"local/x\"\n}",
			want:    "template {\n  data = <<EOF\n(redacted)\n  (redacted)\n\nEOF\n  destination = \"local/x\"\n}",
			secrets: []string{"db/pw", "plain line"},
		},
		{
			name:    "secret heredoc with indented marker",
			in:      "private_key = <<-EOT\n  -----BEGIN KEY-----\n  abc\n  EOT\nport = 1",
			want:    "private_key = <<-EOT\n  (redacted)\n  (redacted)\n  EOT\nport = 1",
			secrets: []string{"BEGIN KEY", "abc"},
		},
		{
			name:    "plain heredoc keeps its text but not URL credentials",
			in:      "args = <<EOF\nconnect postgres://app:pw1@db/x\nEOF",
			want:    "args = <<EOF\nconnect postgres://(redacted)@db/x\nEOF",
			secrets: []string{"pw1"},
		},
		{
			name:    "secret block",
			in:      "config {\n  image = \"web:2\"\n  auth {\n    username = \"bot\"\n    password = \"pa55\"\n    nested {\n      x = 1\n    }\n  }\n  ports = [\"http\"]\n}",
			want:    "config {\n  image = \"web:2\"\n  auth {\n    username = \"(redacted)\"\n    password = \"(redacted)\"\n    nested {\n      x = \"(redacted)\"\n    }\n  }\n  ports = [\"http\"]\n}",
			secrets: []string{"bot", "pa55"},
		},
		{
			name: "secret variable block",
			in: "variable \"db_password\" {\n  type = string\n  default = \"hunter2\"\n}\nvariable \"image\" {\n  default = \"web:2\"\n}\n" +
				"variable \"api_token\" {\n  description = \"a token\"\n  default = {\n    a = \"s6\"\n  }\n  validation {\n    condition = true\n  }\n}\nafter = \"x\"\n" +
				"variable \"tokens\" {\n  default = <<EOF\ns7\nEOF\n}\ndefault = \"shown\"",
			want: "variable \"db_password\" {\n  type = string\n  default = \"(redacted)\"\n}\nvariable \"image\" {\n  default = \"web:2\"\n}\n" +
				"variable \"api_token\" {\n  description = \"a token\"\n  default = {\n    a = \"(redacted)\"\n  }\n  validation {\n    condition = true\n  }\n}\nafter = \"x\"\n" +
				"variable \"tokens\" {\n  default = <<EOF\n(redacted)\nEOF\n}\ndefault = \"shown\"",
			secrets: []string{"hunter2", "s6", "s7"},
		},
		{
			name:    "secret object and list over lines",
			in:      "secrets = {\n  a = \"s1\"\n  b = [\n    \"s2\",\n    \"s3\"]\n}\ntokens = [\n  \"s4\",\n  \"s5\",\n]\nafter = \"shown\"",
			want:    "secrets = {\n  a = \"(redacted)\"\n  b = [\n    \"(redacted)\",\n    \"(redacted)\"]\n}\ntokens = [\n  \"(redacted)\",\n  \"(redacted)\",\n]\nafter = \"shown\"",
			secrets: []string{"s1", "s2", "s3", "s4", "s5"},
		},
		{
			name:    "secret object on one line",
			in:      "auth = { username = \"u\", password = \"p\" },",
			want:    "auth = \"(redacted)\",",
			secrets: []string{`"u"`, `"p"`},
		},
		{
			name:    "flags in args",
			in:      "args = [\"--token\", \"abc\", \"--password=pw2\", \"-v\"]\nargs = [\n  \"--api-key\",\n  \"k3y\",\n  \"--port\",\n  \"80\",\n]",
			want:    "args = [\"--token\", \"(redacted)\", \"--password=(redacted)\", \"-v\"]\nargs = [\n  \"--api-key\",\n  \"(redacted)\",\n  \"--port\",\n  \"80\",\n]",
			secrets: []string{"abc", "pw2", "k3y"},
		},
		{
			name: "an image with a secret-looking word is left alone",
			in:   "image = \"registry/auth-proxy:1.2\"\ncommand = \"keydb-server\"",
			want: "image = \"registry/auth-proxy:1.2\"\ncommand = \"keydb-server\"",
		},
		{
			name:    "closing a block on the line of a secret",
			in:      "env {\n  TOKEN = \"t1\" }\nx = 1",
			want:    "env {\n  TOKEN = \"(redacted)\" }\nx = 1",
			secrets: []string{"t1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := redact.New().Source(tc.in)
			if got != tc.want {
				t.Errorf("redacted:\n%s\nwant:\n%s", got, tc.want)
			}
			if n, m := strings.Count(got, "\n"), strings.Count(tc.in, "\n"); n != m {
				t.Errorf("%d lines out of %d", n+1, m+1)
			}
			for _, s := range tc.secrets {
				if strings.Contains(got, s) {
					t.Errorf("secret %q left in:\n%s", s, got)
				}
			}
		})
	}
}

// TestSource_ExtraKeys: a configured fragment widens the redaction of
// files as it does of plan diffs.
func TestSource_ExtraKeys(t *testing.T) {
	in := "LICENSE_CODE = \"X-1\"\n"
	if got := redact.New().Source(in); got != in {
		t.Fatalf("without the extra key: %q", got)
	}
	if got := redact.New("license").Source(in); got != "LICENSE_CODE = \"(redacted)\"\n" {
		t.Fatalf("with the extra key: %q", got)
	}
}

// TestSource_KeepsLinesOfAnyText: text that is not well-formed HCL
// (unclosed strings, heredocs and brackets, stray closers) is redacted
// line for line too, and a secret after it still is.
func TestSource_KeepsLinesOfAnyText(t *testing.T) {
	for _, in := range []string{
		"a = \"unterminated\nb = 1",
		"token = [\n\"x\"",
		"}}}\n]]\npassword = \"p1\"",
		"data = <<EOF\nnever closed",
		"\"\\\"\" = \"\\\\\"\n# password = p2 in a comment\n// token: p3",
		"auth {\n}\n}\n}\npassword = \"p4\"",
		"",
		"\n\n",
	} {
		got := redact.New().Source(in)
		if strings.Count(got, "\n") != strings.Count(in, "\n") {
			t.Errorf("%q: %q does not keep the lines", in, got)
		}
		for _, s := range []string{"p1", "p4"} {
			if strings.Contains(got, `"`+s+`"`) {
				t.Errorf("%q: secret %s left in %q", in, s, got)
			}
		}
	}
}
