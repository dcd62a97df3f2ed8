#!/usr/bin/env bash
# The Nops demo: a Nomad dev agent, a demo git repository with the example
# jobs of scripts/demo/jobs (one deployed automatically, one that waits for
# approval and runs a pre-deploy hook, one deployed with a canary that waits
# for its promotion), and a 3-server Nops cluster on 127.0.0.1 whose servers
# talk to each other over mutual TLS (a demo CA and server certificate made
# with `nops tls`), as production servers must. The dashboard links jobs,
# deployments and evaluations to the Nomad UI (-nomad-ui-url).
#
# Everything lives under .data/demo (DEMO_DIR). The demo stops everything
# it started on Ctrl-C (SIGINT) or SIGTERM, and removes the management
# token file: a shell runs a background job with SIGINT ignored, so stop a
# demo started with `make demo &` with `kill $(cat .data/demo/pid)`. Set
# NOMAD_ADDR to use a Nomad that is already running. The cluster runs with
# ACLs on: the demo bootstraps them and prints the dashboard's URL and the
# management token (DEMO_ACL=0 runs without ACLs, and says so).
#
# Once the canary job "shop" is deployed, the demo commits its version 2:
# its canary then waits for a promotion, on the dashboard.
#
# DEMO_CHECK=1 makes the demo non-interactive: it checks that the cluster
# serves the dashboard, that a deployment was created, and that the canary
# of shop version 2 is promoted through the dashboard's Promote form, then
# stops everything it started and exits (0 when the checks pass). DEMO_NOPS_PORT
# (default 4650) and DEMO_NOMAD_PORT (default 4646) move the ports.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
nomad_bin="${NOPS_NOMAD_BIN:-$root/bin/nomad}"
nops_bin="${NOPS_BIN:-$root/bin/nops}"
demo="${DEMO_DIR:-$root/.data/demo}"
nomad_port="${DEMO_NOMAD_PORT:-4646}"
nops_port="${DEMO_NOPS_PORT:-4650}"
acl="${DEMO_ACL:-1}"
check="${DEMO_CHECK:-0}"

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
stopped=""
cleanup() {
	[[ -z "$stopped" ]] || return 0
	stopped=1
	echo
	echo "==> Stopping the demo"
	for pid in "${pids[@]}" $nomad_pid; do kill -INT "$pid" 2>/dev/null || true; done
	for pid in "${pids[@]}" $nomad_pid; do wait "$pid" 2>/dev/null || true; done
	# The management token is of no use once the cluster is gone; the
	# servers' data stays under $demo until the next run replaces it.
	rm -f "$demo/token" "$demo/pid"
	echo "==> Stopped; removed $demo/token"
}
# A signal ends the script (and wait with it) at once; the EXIT trap then
# stops what it started, once.
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
printf '%s\n' "$$" >"$demo/pid"

up() { curl -fsS --max-time 2 "$1" >/dev/null 2>&1; }
# retry TRIES COMMAND... runs COMMAND every 0.2 s until it succeeds, at most
# TRIES times; it fails when no try succeeded.
retry() {
	local tries="$1" _
	shift
	for _ in $(seq 1 "$tries"); do
		"$@" && return 0
		sleep 0.2
	done
	return 1
}

# 1. Nomad.
if [[ -n "${NOMAD_ADDR:-}" ]] && nomad_up "$NOMAD_ADDR"; then
	echo "==> Using the Nomad at $NOMAD_ADDR"
else
	start_nomad_dev "$demo/nomad" "$nomad_port" || exit 1
fi

# 2. The demo repository.
repo="$demo/repo"
mkdir -p "$repo/jobs"
cp "$root"/scripts/demo/jobs/* "$repo/jobs/"
git -C "$repo" init -q -b main
git -C "$repo" -c user.name=demo -c user.email=demo@nops.invalid add -A
git -C "$repo" -c user.name=demo -c user.email=demo@nops.invalid commit -qm "demo jobs"
echo "==> Demo repository: $repo (branch main, path jobs)"

# 3. Three Nops servers, with one gossip key and mutual TLS on the RPC
# port: a server refuses to start without it (or insecure_rpc).
gossip_key="$("$nops_bin" operator gossip keygen)"
tls="$demo/tls"
mkdir -p "$tls"
(cd "$tls" && "$nops_bin" tls ca create >/dev/null && "$nops_bin" tls cert create -server >/dev/null) ||
	{ echo "demo: creating the demo CA and server certificate failed" >&2; exit 1; }
echo "==> Demo CA and server certificate: $tls"
config="$demo/nops.hcl"
cat >"$config" <<HCL
tls {
  rpc                    = true
  ca_file                = "$tls/nops-agent-ca.pem"
  cert_file              = "$tls/global-server-nops.pem"
  key_file               = "$tls/global-server-nops-key.pem"
  verify_server_hostname = true
}
HCL
if [[ "$acl" == 1 ]]; then
	printf 'acl {\n  enabled = true\n}\n' >>"$config"
fi
for i in 1 2 3; do
	http=$((nops_port + (i - 1) * 10))
	"$nops_bin" serve -config "$config" \
		-node "nops-$i" -data-dir "$demo/nops-$i" \
		-bind 127.0.0.1 -advertise 127.0.0.1 \
		-http-port "$http" -rpc-port $((http + 1)) -serf-port $((http + 2)) \
		-bootstrap-expect 3 -retry-join "127.0.0.1:$((nops_port + 2))" -encrypt "$gossip_key" \
		-nomad-addr "$NOMAD_ADDR" -nomad-ui-url "$NOMAD_ADDR" -repo "file://$repo#main:jobs" \
		-drift-interval 15s -engine-interval 1s >"$demo/nops-$i.log" 2>&1 &
	pids+=($!)
done
export NOPS_ADDR="http://127.0.0.1:$nops_port"
retry 150 up "$NOPS_ADDR/v1/health" || { echo "demo: the cluster elected no leader; see $demo/nops-*.log" >&2; exit 1; }

# 4. ACLs: the first management token.
export NOPS_TOKEN=""
if [[ "$acl" == 1 ]]; then
	boot="$(curl -fsS --max-time 30 -X POST -H "Content-Type: application/json" "$NOPS_ADDR/v1/acl/bootstrap")" ||
		{ echo "demo: ACL bootstrap failed; see $demo/nops-*.log" >&2; exit 1; }
	NOPS_TOKEN="$(sed -n 's/.*"secret_id": *"\([^"]*\)".*/\1/p' <<<"$boot" | head -n 1)"
	[[ -n "$NOPS_TOKEN" ]] || { echo "demo: no token in the bootstrap answer" >&2; exit 1; }
	printf '%s\n' "$NOPS_TOKEN" >"$demo/token"
	chmod 600 "$demo/token"
	login="Log in with the management token (also in $demo/token):
    $NOPS_TOKEN"
else
	login="ACLs are off in this demo: the dashboard needs no login, and anyone who can reach it can act."
fi

# 5. The canary: once shop version 1 is deployed, commit version 2, whose
# canary waits for a promotion.
api() { curl -fsS --max-time 5 -H "X-Nops-Token: $NOPS_TOKEN" "$NOPS_ADDR$1"; }
# first_id prints the first "id" of a JSON answer.
first_id() { sed -n 's/.*"id": *"\([^"]*\)".*/\1/p' | head -n 1; }
canary=""
shop_deployed() { [[ "$(api "/v1/deployments?job=shop&state=completed" 2>/dev/null || true)" == *'"id"'* ]]; }
if retry 300 shop_deployed; then
	printf 'version = "2"\n' >"$repo/jobs/shop.vars.hcl"
	git -C "$repo" -c user.name=demo -c user.email=demo@nops.invalid commit -qam "shop: version 2, with a canary"
	# Fetch now rather than at the next poll, as a push webhook would.
	name="$(api /v1/repos | sed -n 's/.*"name": *"\([^"]*\)".*/\1/p' | head -n 1)"
	curl -fsS --max-time 10 -X POST -H "X-Nops-Token: $NOPS_TOKEN" -H "Content-Type: application/json" \
		"$NOPS_ADDR/v1/repo/$name/refresh" >/dev/null || true
	echo "==> Committed shop version 2: its canary waits for a promotion on the dashboard"
	canary=1
fi
[[ -n "$canary" ]] || echo "demo: shop version 1 was not deployed in 60s; no canary (see $demo/nops-*.log)" >&2

if [[ "$check" == 1 ]]; then
	# Non-interactive check: the dashboard is served, by every server,
	# and detection created a deployment.
	# ui_served fetches the dashboard of server i at url into its file.
	ui_served() {
		code="$(curl -sS -o "$demo/ui-$i.html" -w '%{http_code}' --max-time 5 -H "X-Nops-Token: $NOPS_TOKEN" "$url" || true)"
		[[ "$code" == 200 ]]
	}
	for i in 1 2 3; do
		url="http://127.0.0.1:$((nops_port + (i - 1) * 10))/ui/"
		code=""
		retry 50 ui_served || true
		[[ "$code" == 200 ]] && grep -q '<h1>Overview</h1>' "$demo/ui-$i.html" ||
			{ echo "demo: $url answered $code, not the dashboard" >&2; exit 1; }
		echo "==> $url serves the dashboard"
	done
	created() { curl -fsS --max-time 5 -H "X-Nops-Token: $NOPS_TOKEN" "$NOPS_ADDR/v1/deployments" | grep -q '"id"'; }
	retry 300 created || { echo "demo: no deployment was created in 60s; see $demo/nops-*.log" >&2; exit 1; }
	echo "==> A deployment was created"
	# The canary of shop version 2 waits; the Promote form of its page on
	# the dashboard (its CSRF token and cookie read from the page, as a
	# browser has them) promotes it, and the deployment completes.
	[[ -n "$canary" ]] || exit 1
	# canary_waits sets id to the deployment of shop whose canary waits.
	canary_waits() {
		id="$(api "/v1/deployments?job=shop&state=applying" 2>/dev/null | first_id || true)"
		events="$( [[ -z "$id" ]] || api "/v1/deployment/$id/events" 2>/dev/null || true)"
		[[ -n "$id" && "$events" == *"canaries wait for promotion"* ]]
	}
	retry 300 canary_waits || id=""
	[[ -n "$id" ]] || { echo "demo: no canary of shop waits for a promotion after 60s; see $demo/nops-*.log" >&2; exit 1; }
	jar="$demo/cookies"
	page="$(curl -fsS --max-time 10 -c "$jar" -H "X-Nops-Token: $NOPS_TOKEN" "$NOPS_ADDR/ui/deployment/$id")"
	[[ "$page" == *'id="promote"'* ]] || { echo "demo: the deployment page of $id shows no Promote button" >&2; exit 1; }
	[[ "$page" == *"href=\"$NOMAD_ADDR/ui/jobs/shop@default\""* ]] ||
		{ echo "demo: the deployment page of $id does not link the job to the Nomad UI" >&2; exit 1; }
	csrf="$(sed -n 's/.*name="csrf" value="\([^"]*\)".*/\1/p' <<<"$page" | head -n 1)"
	code="$(curl -sS -o /dev/null -w '%{http_code}' --max-time 30 -b "$jar" -H "X-Nops-Token: $NOPS_TOKEN" \
		--data-urlencode "csrf=$csrf" "$NOPS_ADDR/ui/deployment/$id/promote")"
	[[ "$code" == 303 ]] || { echo "demo: the dashboard's Promote answered $code" >&2; exit 1; }
	completed() { [[ "$(api "/v1/deployment/$id" 2>/dev/null || true)" =~ \"state\":\ *\"completed\" ]]; }
	retry 300 completed || { echo "demo: the promoted deployment $id did not complete in 60s; see $demo/nops-*.log" >&2; exit 1; }
	echo "==> The canary of shop version 2 was promoted from the dashboard, and its deployment completed"
	echo "DEMO CHECK OK"
	exit 0
fi

cat <<MSG

==> A 3-server Nops cluster is running (HTTP on 127.0.0.1:$nops_port, :$((nops_port + 10)), :$((nops_port + 20)); logs in $demo).

==> Dashboard: $NOPS_ADDR/ui/ (it links to the Nomad UI: $NOMAD_ADDR/ui/)
    $login

    export NOPS_ADDR=$NOPS_ADDR NOMAD_ADDR=$NOMAD_ADDR${NOPS_TOKEN:+ NOPS_TOKEN=\$(cat $demo/token)}
    bin/nops operator raft list-peers      # the cluster
    bin/nops status                        # jobs and deployments
    bin/nops deployment list               # web completes by itself; billing waits; shop v2 waits for its canary
    bin/nops deployment approve <ID>       # approve billing: the backup hook runs, then the register
    bin/nops deployment promote <ID>       # promote shop's canary (or "Promote canaries" on its page)
    bin/nops events -follow                # the audit log
    # change the demo: edit $repo/jobs/web.vars.hcl, then
    #   git -C $repo commit -am "scale web"

Ctrl-C stops everything (in the background, where SIGINT is ignored: kill \$(cat $demo/pid)).
MSG
wait "${pids[@]}" $nomad_pid
