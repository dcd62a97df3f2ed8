# Runs Nops as a Nomad job that talks to Nomad through the Task API of its
# own task ($NOMAD_SECRETS_DIR/api.sock): no Nomad address or TLS settings,
# and no token in the job file or on a command line.
#
# The token: Nomad 1.6 accepts a task's workload identity on the Task API,
# but refuses it where Nops needs it most (job parse and register answer
# "failed to resolve ACL token"). So the job renders an ACL token, kept in
# the Nomad Variable nomad/jobs/nops that only this job's tasks can read,
# into its secrets directory, and Nops reads it with -nomad-token-file. To
# rotate it, write a new token to the variable: the file changes and Nops
# uses the new token without a restart. See docs/nomad-acl.md.
#
# The servers' secrets come from the same variable: the gossip key and the
# mutual-TLS material of the RPC port (a server refuses to start without
# both outside -dev), rendered into the secrets directory with a config
# file that names them.
#
#   nomad acl policy apply -description "Nops" nops docs/nomad-policy.hcl
#   nomad acl token create -name nops -policy nops            # note the Secret ID
#   nops tls ca create && nops tls cert create -server        # nops-agent-ca*.pem, global-server-nops*.pem
#   nomad var put nomad/jobs/nops token=<secret id> encrypt=$(nops operator gossip keygen) \
#     ca=@nops-agent-ca.pem cert=@global-server-nops.pem key=@global-server-nops-key.pem
#   nomad job run -var 'repository=https://git.example.com/ops/jobs.git#main:nomad' docs/nops.nomad.hcl
#
# On a Nomad whose Task API accepts the workload identity for job parse and
# register, drop the template and -nomad-token-file and add an identity
# block with file = true: -nomad-task-api then uses secrets/nomad_token.

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
          "-nomad-token-file", "$${NOMAD_SECRETS_DIR}/nops_nomad_token",
          "-repo", var.repository,
          "-http-port", "$${NOMAD_PORT_http}",
          "-config", "$${NOMAD_SECRETS_DIR}/nops.hcl",
        ], var.serve_args)
      }

      # The ACL token, read by the task's workload identity from the job's
      # own variable. Nops reads the file again when it changes and when
      # Nomad refuses the token, so no restart is needed.
      template {
        data        = "{{ with nomadVar \"nomad/jobs/nops\" }}{{ .token }}{{ end }}"
        destination = "secrets/nops_nomad_token"
        perms       = "600"
        change_mode = "noop"
      }

      # The gossip key and the RPC port's mutual TLS, from the same
      # variable. A change restarts the task: a server reads them at start.
      template {
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/nops" }}encrypt = "{{ .encrypt }}"{{ end }}
          tls {
            rpc                    = true
            ca_file                = "{{ env "NOMAD_SECRETS_DIR" }}/ca.pem"
            cert_file              = "{{ env "NOMAD_SECRETS_DIR" }}/server.pem"
            key_file               = "{{ env "NOMAD_SECRETS_DIR" }}/server-key.pem"
            verify_server_hostname = true
          }
        EOT
        destination = "secrets/nops.hcl"
        perms       = "600"
      }
      template {
        data        = "{{ with nomadVar \"nomad/jobs/nops\" }}{{ .ca }}{{ end }}"
        destination = "secrets/ca.pem"
        perms       = "600"
      }
      template {
        data        = "{{ with nomadVar \"nomad/jobs/nops\" }}{{ .cert }}{{ end }}"
        destination = "secrets/server.pem"
        perms       = "600"
      }
      template {
        data        = "{{ with nomadVar \"nomad/jobs/nops\" }}{{ .key }}{{ end }}"
        destination = "secrets/server-key.pem"
        perms       = "600"
      }

      resources {
        cpu    = 200
        memory = 256
      }
    }
  }
}
