# shellcheck shell=bash
# A Nomad dev agent for the dev scripts to run Nops against. Source this file
# from a script that has set nomad_bin to the Nomad binary.

# nomad_up ADDR succeeds when the Nomad at ADDR answers with a leader.
nomad_up() {
	curl -fsS --max-time 2 "$1/v1/status/leader" 2>/dev/null | grep -q '"'
}

# start_nomad_dev DIR PORT starts a Nomad dev agent in the background on
# 127.0.0.1:PORT (RPC and serf on the next two ports), with its config
# (DIR/agent.hcl), data (DIR/data) and log (DIR/nomad.log) under DIR, and
# waits up to 60s for its leader. It exports NOMAD_ADDR and sets nomad_pid
# as soon as the agent runs, so the caller's cleanup can stop it even when
# the wait fails. It returns 1, with the end of the log on stderr, when the
# agent exits or elects no leader in time.
start_nomad_dev() {
	local dir="$1" port="$2" me="${0##*/}"
	me="${me%.sh}"
	mkdir -p "$dir"
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
	export NOMAD_ADDR="http://127.0.0.1:$port"
	echo "==> Starting a Nomad dev agent at $NOMAD_ADDR (log: $dir/nomad.log)"
	"$nomad_bin" agent -dev -bind=127.0.0.1 -config="$dir/agent.hcl" >"$dir/nomad.log" 2>&1 &
	nomad_pid=$!
	local _
	for _ in $(seq 1 300); do
		nomad_up "$NOMAD_ADDR" && return 0
		kill -0 "$nomad_pid" 2>/dev/null || break
		sleep 0.2
	done
	if kill -0 "$nomad_pid" 2>/dev/null; then
		echo "$me: the Nomad agent did not elect a leader in 60s; last lines of $dir/nomad.log:" >&2
	else
		echo "$me: the Nomad agent exited; last lines of $dir/nomad.log:" >&2
	fi
	tail -n 30 "$dir/nomad.log" >&2
	return 1
}
