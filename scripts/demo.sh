#!/usr/bin/env bash
# The Nops demo: a Nomad dev agent, a demo git repository with example jobs
# (one deployed automatically, one that waits for approval and runs a
# pre-deploy hook), and a 3-server Nops cluster on 127.0.0.1.
#
# Everything lives under .data/demo and stops on Ctrl-C. Set NOMAD_ADDR to
# use a Nomad that is already running.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
nomad_bin="${NOPS_NOMAD_BIN:-$root/bin/nomad}"
nops_bin="${NOPS_BIN:-$root/bin/nops}"
demo="$root/.data/demo"
nomad_port="${DEMO_NOMAD_PORT:-4646}"

for bin in "$nomad_bin" "$nops_bin"; do
	[[ -x "$bin" ]] || { echo "demo: $bin not found; run \`make build nomad\`" >&2; exit 1; }
done
rm -rf "$demo"
mkdir -p "$demo"
# shellcheck source=lib/nomad.sh
source "$root/scripts/lib/nomad.sh"
# The Nops servers; and the Nomad agent, when the demo starts one.
pids=()
nomad_pid=""
cleanup() {
	echo
	echo "==> Stopping the demo"
	for pid in "${pids[@]}" $nomad_pid; do kill -INT "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}" $nomad_pid; do wait "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT INT TERM

up() { curl -fsS --max-time 2 "$1" >/dev/null 2>&1; }

# 1. Nomad.
if [[ -n "${NOMAD_ADDR:-}" ]] && nomad_up "$NOMAD_ADDR"; then
	echo "==> Using the Nomad at $NOMAD_ADDR"
else
	start_nomad_dev "$demo/nomad" "$nomad_port" || exit 1
fi

# 2. The demo repository.
repo="$demo/repo"
mkdir -p "$repo/jobs"
cat >"$repo/jobs/web.nomad.hcl" <<'HCL'
# Deployed automatically on every change (policy auto).
job "web" {
  type = "service"
  meta {
    nops_managed = "true"
  }
  update {
    min_healthy_time  = "1s"
    healthy_deadline  = "30s"
    progress_deadline = "1m"
  }
  group "web" {
    count = var.count
    task "web" {
      driver = "mock_driver"
      config {
        run_for = "24h"
      }
      resources {
        cpu    = 10
        memory = 16
      }
    }
  }
}

variable "count" {
  type    = number
  default = 1
}
HCL
cat >"$repo/jobs/web.vars.hcl" <<'HCL'
count = 2
HCL
cat >"$repo/jobs/billing.nomad.hcl" <<'HCL'
# Waits for a person's approval, then runs the "backup" hook before the
# register (policy approval, pre-hook backup).
job "billing" {
  type = "service"
  meta {
    nops_managed   = "true"
    nops_policy    = "approval"
    nops_pre_hooks = "backup"
  }
  update {
    min_healthy_time  = "1s"
    healthy_deadline  = "30s"
    progress_deadline = "1m"
  }
  group "billing" {
    task "billing" {
      driver = "mock_driver"
      config {
        run_for = "24h"
      }
      env {
        DB_PASSWORD = "never-shown-by-nops"
      }
      resources {
        cpu    = 10
        memory = 16
      }
    }
  }
}
HCL
cat >"$repo/jobs/backup.nomad.hcl" <<'HCL'
# A hook: a parameterized batch job Nops dispatches before billing deploys.
job "backup" {
  type = "batch"
  meta {
    nops_role         = "hook"
    nops_hook_timeout = "2m"
  }
  parameterized {
    meta_optional = ["nops_deployment", "nops_job", "nops_commit", "nops_phase"]
  }
  group "backup" {
    task "backup" {
      driver = "mock_driver"
      config {
        run_for   = "2s"
        exit_code = 0
      }
      resources {
        cpu    = 10
        memory = 16
      }
    }
  }
}
HCL
git -C "$repo" init -q -b main
git -C "$repo" -c user.name=demo -c user.email=demo@nops.invalid add -A
git -C "$repo" -c user.name=demo -c user.email=demo@nops.invalid commit -qm "demo jobs"
echo "==> Demo repository: $repo (branch main, path jobs)"

# 3. Three Nops servers, with one gossip key.
gossip_key="$("$nops_bin" operator gossip keygen)"
for i in 1 2 3; do
	http=$((4650 + (i - 1) * 10))
	"$nops_bin" serve \
		-node "nops-$i" -data-dir "$demo/nops-$i" \
		-bind 127.0.0.1 -advertise 127.0.0.1 \
		-http-port "$http" -rpc-port $((http + 1)) -serf-port $((http + 2)) \
		-bootstrap-expect 3 -retry-join 127.0.0.1:4652 -encrypt "$gossip_key" \
		-nomad-addr "$NOMAD_ADDR" -repo "file://$repo#main:jobs" \
		-drift-interval 15s -engine-interval 1s >"$demo/nops-$i.log" 2>&1 &
	pids+=($!)
done
export NOPS_ADDR="http://127.0.0.1:4650"
for _ in $(seq 1 150); do
	up "$NOPS_ADDR/v1/health" && break
	sleep 0.2
done
up "$NOPS_ADDR/v1/health" || { echo "demo: the cluster elected no leader; see $demo/nops-*.log" >&2; exit 1; }

cat <<MSG

==> A 3-server Nops cluster is running (HTTP on 127.0.0.1:4650, :4660, :4670; logs in $demo).

    export NOPS_ADDR=$NOPS_ADDR NOMAD_ADDR=$NOMAD_ADDR
    bin/nops operator raft list-peers      # the cluster
    bin/nops status                        # jobs and deployments
    bin/nops deployment list               # web completes by itself; billing waits
    bin/nops deployment approve <ID>       # approve billing: the backup hook runs, then the register
    bin/nops events -follow                # the audit log
    # change the demo: edit $repo/jobs/web.vars.hcl, then
    #   git -C $repo commit -am "scale web"

Ctrl-C stops everything.
MSG
wait "${pids[@]}" $nomad_pid
