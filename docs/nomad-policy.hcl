# The Nomad ACL policy Nops needs: nothing more. Nops reads and plans the
# jobs of each namespace it manages, registers them, registers and
# dispatches hook revisions and stops the unused ones, and watches the job
# event stream. Give one namespace block per managed namespace (or
# namespace "*" with -namespaces '*').
#
#   nomad acl policy apply -description "Nops" nops docs/nomad-policy.hcl
#   nomad acl token create -name nops -policy nops
#
# When Nops runs as a Nomad job (docs/nops.nomad.hcl, -nomad-task-api), it
# still needs a token of this policy on Nomad 1.6, kept in the job's Nomad
# Variable: Nomad 1.6 refuses a task's workload identity on job parse and
# register, whatever policy is attached to the job. The workload identity
# needs no policy of its own: it reads the job's variable and the services
# of its namespace by default. See docs/nomad-acl.md.
#
# Capabilities, by the calls that need them:
#   list-jobs     list the live jobs (detection)
#   read-job      read a job, its versions, evaluations, deployments and
#                 allocations (health, hook runs); the job event stream
#   submit-job    parse and plan (dry-run) a job file, register a job or a
#                 hook revision, stop an unused hook revision, promote
#                 canaries
#   dispatch-job  dispatch a hook run
#   node read     the Nomad servers' version (GET /v1/agent/members), read
#                 once a drift interval: a change re-plans every job once.
#                 Without it Nops logs a warning and only the
#                 full_replan_interval safety net covers Nomad upgrades.
namespace "default" {
  capabilities = ["list-jobs", "read-job", "submit-job", "dispatch-job"]
}

node {
  policy = "read"
}
