package main

import (
	"strings"
	"testing"
)

func TestTable(t *testing.T) {
	in := `goos: linux
pkg: github.com/nops-dev/nops/agent
BenchmarkWrite_Throughput-2   	    7930	    564198 ns/op	      1772 writes/s
BenchmarkWrite_Throughput-2   	    7000	    600000 ns/op	      1500 writes/s
BenchmarkWrite_Throughput-2   	    8000	    500000 ns/op	      2000 writes/s
pkg: github.com/nops-dev/nops/fsm
BenchmarkRetentionYear1000Jobs-2   	       1	1259878779 ns/op	     44164 deployments-deleted
--- BENCH: something
PASS
`
	var out strings.Builder
	if err := run(strings.NewReader(in), &out); err != nil {
		t.Fatal(err)
	}
	got := out.String()
	if !strings.HasPrefix(got, in) {
		t.Fatalf("the input is not passed through:\n%s", got)
	}
	table := got[len(in):]
	rows := map[string]string{}
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if len(f) == 6 {
			rows[f[0]+" "+f[1]] = strings.Join(f[2:], " ")
		}
	}
	for row, want := range map[string]string{
		"agent.BenchmarkWrite_Throughput writes/s":               "1772 1500 2000 3",
		"agent.BenchmarkWrite_Throughput ns/op":                  "564198 500000 600000 3",
		"fsm.BenchmarkRetentionYear1000Jobs deployments-deleted": "44164 44164 44164 1",
	} {
		if rows[row] != want {
			t.Errorf("row %q = %q, want %q:\n%s", row, rows[row], want, table)
		}
	}
	if err := run(strings.NewReader("PASS\n"), &strings.Builder{}); err == nil {
		t.Error("an input without figures is accepted")
	}
}
