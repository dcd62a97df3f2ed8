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

nomad_up() {
	curl -fsS --max-time 2 "$1/v1/status/leader" 2>/dev/null | grep -q '"'
}

if [[ -n "${NOMAD_ADDR:-}" ]] && nomad_up "$NOMAD_ADDR"; then
	echo "==> Using the Nomad at $NOMAD_ADDR"
else
	export NOMAD_ADDR="http://127.0.0.1:$port"
	if nomad_up "$NOMAD_ADDR"; then
		echo "==> Using the Nomad already running at $NOMAD_ADDR"
	else
		dir="$(mktemp -d -t nops-dev-nomad.XXXXXX)"
		cat >"$dir/agent.hcl" <<HCL
data_dir             = "$dir/data"
disable_update_check = true

ports {
  http = $port
  rpc  = $((port + 1))
  serf = $((port + 2))
}

client {
  options {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}

plugin "raw_exec" {
  config {
    enabled = true
  }
}
HCL
		echo "==> Starting a Nomad dev agent at $NOMAD_ADDR (log: $dir/nomad.log)"
		"$nomad_bin" agent -dev -bind=127.0.0.1 -config="$dir/agent.hcl" >"$dir/nomad.log" 2>&1 &
		nomad_pid=$!
		cleanup() {
			kill -INT "$nomad_pid" 2>/dev/null || true
			wait "$nomad_pid" 2>/dev/null || true
			rm -rf "$dir" 2>/dev/null || true
		}
		trap cleanup EXIT

		for _ in $(seq 1 300); do
			if ! kill -0 "$nomad_pid" 2>/dev/null; then
				echo "dev: the Nomad agent exited; last lines of its log:" >&2
				tail -n 30 "$dir/nomad.log" >&2
				exit 1
			fi
			if nomad_up "$NOMAD_ADDR"; then
				break
			fi
			sleep 0.2
		done
		if ! nomad_up "$NOMAD_ADDR"; then
			echo "dev: the Nomad agent did not elect a leader in 60s" >&2
			exit 1
		fi
	fi
fi

echo "==> Starting nops serve -dev (Nomad: $NOMAD_ADDR)"
"$nops_bin" serve -dev "$@"
