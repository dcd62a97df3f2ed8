# Runs Nops as a Nomad job that talks to Nomad through the Task API of its
# own task ($NOMAD_SECRETS_DIR/api.sock), with the task's workload identity:
# no Nomad token to create, store or rotate. Nomad 1.6 or later.
#
# Attach the policy Nops needs to this job, so its workload identity carries
# it (see docs/nomad-acl.md):
#
#   nomad acl policy apply -namespace default -job nops nops docs/nomad-policy.hcl
#   nomad job run -var 'repository=https://git.example.com/ops/jobs.git#main:nomad' docs/nops.nomad.hcl

variable "repository" {
  description = "The git repository of the job files, as url#branch:path."
  type        = string
}

variable "nops_binary" {
  description = "Path of the nops binary on the client nodes."
  type        = string
  default     = "/usr/local/bin/nops"
}

variable "driver" {
  description = "Task driver that runs the binary: exec, or raw_exec where exec is not available."
  type        = string
  default     = "exec"
}

variable "http_port" {
  description = "Port of the Nops API and dashboard."
  type        = number
  default     = 4650
}

variable "serve_args" {
  description = "Further flags of nops serve. The default runs one server whose Raft state lives in the allocation; for high availability run three (count = 3) with -bootstrap-expect 3 and -retry-join or a consul block."
  type        = list(string)
  default     = ["-data-dir", "$${NOMAD_ALLOC_DIR}/data", "-bootstrap-expect", "1"]
}

job "nops" {
  type = "service"

  group "nops" {
    count = 1

    network {
      port "http" {
        static = var.http_port
      }
    }

    task "nops" {
      driver = var.driver

      config {
        command = var.nops_binary
        args = concat([
          "serve",
          "-nomad-task-api",
          "-repo", var.repository,
          "-http-port", "$${NOMAD_PORT_http}",
        ], var.serve_args)
      }

      # The task's workload identity, written to secrets/nomad_token, is
      # the token -nomad-task-api sends. Nops reads the file again when it
      # changes or when Nomad refuses the token.
      identity {
        file = true
      }

      resources {
        cpu    = 200
        memory = 256
      }
    }
  }
}
