package testutil

import "os"

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
