package testutil

import (
	"cmp"
	"math"
	"os"
	"slices"
)

// BenchSmokeEnv names the environment variable that, set to 1, makes the
// benchmarks a smoke test. `make bench-smoke`, which `make test` runs,
// runs every benchmark once that way: over a small size and short windows,
// with the same steps and the same checks, so that a benchmark that no
// longer runs fails CI rather than the next `make bench`. A smoke run's
// figures mean nothing.
const BenchSmokeEnv = "NOPS_BENCH_SMOKE"

// BenchSmoke reports whether the benchmarks run as a smoke test.
func BenchSmoke() bool { return os.Getenv(BenchSmokeEnv) == "1" }

// BenchSize returns full, or smoke when the benchmarks run as a smoke
// test: a benchmark's size, count or window.
func BenchSize[T any](full, smoke T) T {
	if BenchSmoke() {
		return smoke
	}
	return full
}

// Percentile returns the p-th percentile (0 < p <= 1) of v by nearest
// rank, the one definition every benchmark reports with; 0 for no
// samples. v is not changed.
func Percentile[T cmp.Ordered](v []T, p float64) T {
	var zero T
	if len(v) == 0 {
		return zero
	}
	s := slices.Sorted(slices.Values(v))
	k := int(math.Ceil(p * float64(len(s))))
	return s[min(max(k, 1), len(s))-1]
}

// Median is the 50th percentile of v (the lower middle of an even count).
func Median[T cmp.Ordered](v []T) T { return Percentile(v, 0.5) }
