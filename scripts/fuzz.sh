#!/usr/bin/env bash
# Runs Go fuzz targets one after another, each for a set time, and stops at
# the first crash.
#
# usage: scripts/fuzz.sh FUZZTIME MINIMIZETIME package:Target...
#
# Go's fuzzer reports "context deadline exceeded" as a failure when its time
# runs out while it is shrinking a new (not failing) input; that is not a
# crash, so it is reported and the run goes on. A crash writes its input to
# the package's testdata/fuzz/<Target>/, which this prints.
set -euo pipefail

fuzztime=$1
minimize=$2
shift 2
go=${GO:-go}
for t in "$@"; do
	pkg=${t%%:*}
	fn=${t##*:}
	echo "==> $fn in $pkg for $fuzztime"
	log=$(mktemp)
	if "$go" test -run '^$' -fuzz "^${fn}\$" -fuzztime "$fuzztime" -fuzzminimizetime "$minimize" \
		-parallel "${FUZZ_PARALLEL:-1}" "$pkg" 2>&1 | tee "$log"; then
		rm -f "$log"
		continue
	fi
	if grep -q "Failing input written" "$log" || ! grep -q "context deadline exceeded" "$log"; then
		echo "==> $fn failed: see above" >&2
		rm -f "$log"
		exit 1
	fi
	echo "==> $fn: the time ran out while shrinking a new input (not a crash)"
	rm -f "$log"
done
exit 0
