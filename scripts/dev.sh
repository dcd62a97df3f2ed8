#!/usr/bin/env bash
# Runs one Nops dev server (`nops serve -dev`) against a Nomad dev agent.
#
# If NOMAD_ADDR is set and answers, that Nomad is used. Otherwise a Nomad dev
# agent is started from bin/nomad on 127.0.0.1:${DEV_NOMAD_PORT:-4646}, with
# its data in a temporary directory, and stopped when Nops exits. Extra
# arguments go to `nops serve`.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
nomad_bin="${NOPS_NOMAD_BIN:-$root/bin/nomad}"
nops_bin="${NOPS_BIN:-$root/bin/nops}"
port="${DEV_NOMAD_PORT:-4646}"

for bin in "$nomad_bin" "$nops_bin"; do
	if [[ ! -x "$bin" ]]; then
		echo "dev: $bin not found; run \`make build nomad\`" >&2
		exit 1
	fi
done

# shellcheck source=lib/nomad.sh
source "$root/scripts/lib/nomad.sh"

if [[ -n "${NOMAD_ADDR:-}" ]] && nomad_up "$NOMAD_ADDR"; then
	echo "==> Using the Nomad at $NOMAD_ADDR"
elif nomad_up "http://127.0.0.1:$port"; then
	export NOMAD_ADDR="http://127.0.0.1:$port"
	echo "==> Using the Nomad already running at $NOMAD_ADDR"
else
	dir="$(mktemp -d -t nops-dev-nomad.XXXXXX)"
	nomad_pid=""
	cleanup() {
		if [[ -n "$nomad_pid" ]]; then
			kill -INT "$nomad_pid" 2>/dev/null || true
			wait "$nomad_pid" 2>/dev/null || true
		fi
		rm -rf "$dir" 2>/dev/null || true
	}
	trap cleanup EXIT
	start_nomad_dev "$dir" "$port" || exit 1
fi

echo "==> Starting nops serve -dev (Nomad: $NOMAD_ADDR)"
"$nops_bin" serve -dev "$@"
