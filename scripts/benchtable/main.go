// Command benchtable reads the output of `go test -bench` on standard
// input, passes it through to standard output, and ends with one table of
// every figure the benchmarks reported: for each benchmark and unit, the
// median over the runs (go test -count), the lowest, the highest and the
// number of runs.
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// figure is one benchmark's values of one unit, in the order read.
type figure struct {
	bench, unit string
	values      []float64
}

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer) error {
	var order []string
	figures := map[string]*figure{}
	pkg := ""
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(out, line)
		if p, ok := strings.CutPrefix(line, "pkg: "); ok {
			pkg = strings.TrimPrefix(p, "github.com/nops-dev/nops/")
			continue
		}
		fields := strings.Fields(line)
		// BenchmarkX-2  <iterations>  <value> <unit>  <value> <unit> ...
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") || len(fields)%2 != 0 {
			continue
		}
		if _, err := strconv.Atoi(fields[1]); err != nil {
			continue
		}
		name := fields[0]
		if i := strings.LastIndex(name, "-"); i > 0 {
			name = name[:i]
		}
		if pkg != "" {
			name = pkg + "." + name
		}
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				continue
			}
			key := name + "\x00" + fields[i+1]
			f, ok := figures[key]
			if !ok {
				f = &figure{bench: name, unit: fields[i+1]}
				figures[key] = f
				order = append(order, key)
			}
			f.values = append(f.values, v)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if len(order) == 0 {
		return fmt.Errorf("no benchmark figures in the input")
	}
	fmt.Fprintln(out)
	fmt.Fprintln(out, "Every figure (median over the runs; machines are noisy, compare medians of several runs):")
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BENCHMARK\tUNIT\tMEDIAN\tMIN\tMAX\tRUNS")
	for _, key := range order {
		f := figures[key]
		s := slices.Sorted(slices.Values(f.values))
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", f.bench, f.unit, num(median(s)), num(s[0]), num(s[len(s)-1]), len(s))
	}
	return tw.Flush()
}

func median(sorted []float64) float64 {
	n := len(sorted)
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// num writes a figure with four significant digits, and large ones whole.
func num(v float64) string {
	if v >= 1e4 || v <= -1e4 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 4, 64)
}
