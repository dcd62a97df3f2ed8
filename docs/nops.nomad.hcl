# Runs a 3-server Nops cluster as a Nomad job: production servers (gossip
# encryption, mutual TLS between them and on the API, ACLs on) that talk to
# Nomad through the Task API of their own task ($NOMAD_SECRETS_DIR/api.sock):
# no Nomad address or TLS settings, and no secret in the job file or on a
# command line. The tests run this file as it is (with the raw_exec driver
# and dynamic ports, given as job variables) on a Nomad with ACLs.
#
# Secrets: one Nomad Variable, nomad/jobs/nops, which only this job's tasks
# can read, holds the Nomad ACL token Nops uses (Nomad 1.6 refuses a task's
# workload identity on job parse and register: see docs/nomad-acl.md), the
# gossip key and the TLS material. Templates render them into each task's
# secrets directory. Rotating the token is writing the variable (Nops reads
# the file again, no restart); new certificates are read on SIGHUP, which
# the templates send.
#
# Finding each other: each allocation registers its gossip port as the
# Nomad service nops-serf, and a template renders the addresses registered
# when it starts into retry_join. The allocation that renders last sees
# every other one, and gossip spreads the rest; a replacement allocation
# finds the servers that run.
#
#   nomad acl policy apply -description "Nops" nops docs/nomad-policy.hcl
#   nomad acl token create -name nops -policy nops                 # note the Secret ID
#   nops tls ca create
#   nops tls cert create -server                                   # global-server-nops.pem
#   nops tls cert create -cli                                      # global-cli-nops.pem, for you
#   nomad var put nomad/jobs/nops token=<secret id> encrypt=$(nops operator gossip keygen) \
#     ca=@nops-agent-ca.pem cert=@global-server-nops.pem key=@global-server-nops-key.pem
#   nomad job run -var 'repository=https://git.example.com/ops/jobs.git#main:nomad' docs/nops.nomad.hcl
#   nops acl bootstrap -address https://<a client's address>:4650 \
#     -ca-cert nops-agent-ca.pem -client-cert global-cli-nops.pem -client-key global-cli-nops-key.pem
#
# Each allocation is a server of its own (node name nops-<short alloc ID>,
# Raft data in the allocation directory): Nomad replaces them one at a time,
# a stopped one leaves the cluster (SIGINT) and a new one joins it as a
# non-voter that autopilot promotes once it has caught up. Stopping the
# whole job discards the state: take a snapshot first (nops operator
# snapshot save). Deploy this job by hand, never through Nops itself.

variable "repository" {
  description = "The git repository of the job files, as url#branch:path."
  type        = string
}

variable "servers" {
  description = "The number of servers: 3, or 5 to survive two losses."
  type        = number
  default     = 3
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

# Static ports keep every server on a host of its own (two allocations
# cannot hold one static port) and fixed firewall rules; 0 makes a port
# dynamic, which lets several servers share a host (as in the tests).
variable "http_port" {
  description = "Port of the Nops API and dashboard (0: dynamic)."
  type        = number
  default     = 4650
}

variable "rpc_port" {
  description = "Port of Raft and forwarding between the servers (0: dynamic)."
  type        = number
  default     = 4651
}

variable "serf_port" {
  description = "Port of serf gossip, TCP and UDP (0: dynamic)."
  type        = number
  default     = 4652
}

variable "verify_incoming" {
  description = "Whether API clients must present a certificate of the CA. Git webhooks then need one too: turn it off when they reach the API directly."
  type        = bool
  default     = true
}

variable "extra_args" {
  description = "Further flags of nops serve, such as -namespaces."
  type        = list(string)
  default     = []
}

job "nops" {
  type = "service"

  group "nops" {
    count = var.servers

    network {
      port "http" {
        static = var.http_port
      }
      port "rpc" {
        static = var.rpc_port
      }
      port "serf" {
        static = var.serf_port
      }
    }

    # The API, for operators and proxies. A TCP check: with
    # verify_incoming an HTTP check would need a client certificate.
    service {
      provider = "nomad"
      name     = "nops"
      port     = "http"

      check {
        type     = "tcp"
        interval = "10s"
        timeout  = "2s"
      }
    }

    # The gossip ports the servers join each other through.
    service {
      provider = "nomad"
      name     = "nops-serf"
      port     = "serf"
    }

    # One server at a time, each given the time to catch up and be promoted
    # to voter (autopilot's server_stabilization_time is 10s) before the
    # next is replaced.
    update {
      max_parallel     = 1
      min_healthy_time = "30s"
      healthy_deadline = "5m"
    }

    task "nops" {
      driver = var.driver

      # SIGINT makes a server leave gracefully: a leader hands its
      # leadership over first.
      kill_signal  = "SIGINT"
      kill_timeout = "30s"

      config {
        command = var.nops_binary
        args = concat([
          "serve",
          "-config", "$${NOMAD_SECRETS_DIR}/nops.hcl",
          "-config", "$${NOMAD_TASK_DIR}/join.hcl",
          "-node", "nops-$${NOMAD_SHORT_ALLOC_ID}",
          "-data-dir", "$${NOMAD_ALLOC_DIR}/data",
          "-bind", "$${NOMAD_IP_serf}",
          "-advertise", "$${NOMAD_IP_serf}",
          "-http-port", "$${NOMAD_PORT_http}",
          "-rpc-port", "$${NOMAD_PORT_rpc}",
          "-serf-port", "$${NOMAD_PORT_serf}",
          "-bootstrap-expect", format("%d", var.servers),
          "-nomad-task-api",
          "-nomad-token-file", "$${NOMAD_SECRETS_DIR}/nops_nomad_token",
          "-repo", var.repository,
        ], var.extra_args)
      }

      # The Nomad ACL token, read by the task's workload identity from the
      # job's own variable. Nops reads the file again when it changes and
      # when Nomad refuses the token, so no restart is needed.
      template {
        data        = "{{ with nomadVar \"nomad/jobs/nops\" }}{{ .token }}{{ end }}"
        destination = "secrets/nops_nomad_token"
        perms       = "600"
        change_mode = "noop"
      }

      # The gossip key, and TLS on the RPC port (required outside -dev) and
      # on the API; ACLs on. A server reads encrypt only at its first start
      # (its keyring wins after): rotate with nops operator gossip keyring.
      template {
        data        = <<-EOT
          {{ with nomadVar "nomad/jobs/nops" }}encrypt = "{{ .encrypt }}"{{ end }}
          tls {
            rpc                    = true
            http                   = true
            ca_file                = "{{ env "NOMAD_SECRETS_DIR" }}/ca.pem"
            cert_file              = "{{ env "NOMAD_SECRETS_DIR" }}/server.pem"
            key_file               = "{{ env "NOMAD_SECRETS_DIR" }}/server-key.pem"
            verify_server_hostname = true
            verify_incoming        = ${var.verify_incoming}
          }
          acl {
            enabled = true
          }
        EOT
        destination = "secrets/nops.hcl"
        perms       = "600"
      }

      # The CA, certificate and key: a server reads them again on SIGHUP.
      template {
        data          = "{{ with nomadVar \"nomad/jobs/nops\" }}{{ .ca }}{{ end }}"
        destination   = "secrets/ca.pem"
        perms         = "600"
        change_mode   = "signal"
        change_signal = "SIGHUP"
      }
      template {
        data          = "{{ with nomadVar \"nomad/jobs/nops\" }}{{ .cert }}{{ end }}"
        destination   = "secrets/server.pem"
        perms         = "600"
        change_mode   = "signal"
        change_signal = "SIGHUP"
      }
      template {
        data          = "{{ with nomadVar \"nomad/jobs/nops\" }}{{ .key }}{{ end }}"
        destination   = "secrets/server-key.pem"
        perms         = "600"
        change_mode   = "signal"
        change_signal = "SIGHUP"
      }

      # The gossip addresses of the servers registered when this one
      # starts (its own among them). Joining is only needed once: later
      # changes are written to the file but restart nothing.
      template {
        data        = <<-EOT
          retry_join = [{{ range nomadService "nops-serf" }}"{{ .Address }}:{{ .Port }}", {{ end }}]
        EOT
        destination = "local/join.hcl"
        change_mode = "noop"
      }

      resources {
        cpu    = 200
        memory = 256
      }
    }
  }
}
