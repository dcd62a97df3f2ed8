# Runs the Nops cluster of docs/nops.nomad.hcl with the docker driver, from
# the Nops image (docs/image.md). Read that file's notes first: this job has
# the same servers, ports, services, update strategy, templates (the token,
# gossip key and TLS material from the Nomad Variable nomad/jobs/nops) and
# nops serve arguments, bar -bind (a test keeps the two files the same).
# Only the task differs: the image instead of a binary on the node.
#
# Network: the container is on Docker's default bridge, and the driver
# publishes each port of config.ports on the host's address, for TCP and
# UDP both (serf gossips over both; Raft and forwarding use the RPC port's
# TCP). The ports have no "to": the container listens on the very port the
# host publishes, so the ports a server advertises are the ones the other
# servers reach. The host's address is not the container's, so a server
# binds 0.0.0.0 and advertises ${NOMAD_IP_serf}, the host's address, which
# the nops-serf service registers too: servers on other hosts, and on the
# same host, reach each other through the published ports. Other containers
# on the bridge can reach the ports directly; they meet the same mutual TLS,
# gossip key and ACLs.
#
# The image runs as user 65532 (nops), not root: the templates are
# rendered for that user (uid, gid), the Task API socket of a task without
# a user is open to any user of the container, and the data directory, in
# the allocation's shared data directory, is writable by all.
#
# The image comes from a registry (push the release archive there first,
# docs/image.md), or from the release archive itself:
#
#   nomad job run -var 'repository=https://git.example.com/ops/jobs.git#main:nomad' \
#     -var 'image=ghcr.io/nops-dev/nops:1.2.3' docs/nops-docker.nomad.hcl
#
#   nomad job run -var 'repository=https://git.example.com/ops/jobs.git#main:nomad' \
#     -var 'image_archive=https://files.example.com/nops_1.2.3_oci.tar' \
#     -var 'image=ghcr.io/nops-dev/nops:1.2.3-${attr.cpu.arch}' docs/nops-docker.nomad.hcl
#
# Loaded from the archive, the image of each platform is tagged
# <repository>:<version>-<arch> (the archive's Docker manifest.json), and
# ${attr.cpu.arch} picks the node's: amd64 or arm64.

variable "repository" {
  description = "The git repository of the job files, as url#branch:path."
  type        = string
}

variable "image" {
  description = "The Nops image: a registry reference (ghcr.io/nops-dev/nops:1.2.3), or with image_archive the tag it loads as (ghcr.io/nops-dev/nops:1.2.3-$${attr.cpu.arch})."
  type        = string
}

variable "image_archive" {
  description = "URL of the release archive nops_<version>_oci.tar to load the image from; empty pulls image from its registry."
  type        = string
  default     = ""
}

variable "servers" {
  description = "The number of servers: 3, or 5 to survive two losses."
  type        = number
  default     = 3
}

# Static ports keep every server on a host of its own (two allocations
# cannot hold one static port) and fixed firewall rules; 0 makes a port
# dynamic, which lets several servers share a host.
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

    # No "to": the container port is the host's (see the notes above).
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

    # The gossip ports the servers join each other through: the host's
    # address and port.
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
      driver = "docker"

      # SIGINT makes a server leave gracefully: a leader hands its
      # leadership over first.
      kill_signal  = "SIGINT"
      kill_timeout = "30s"

      # The release archive, fetched as it is (not unpacked) for load.
      dynamic "artifact" {
        for_each = var.image_archive == "" ? [] : [var.image_archive]
        content {
          source      = artifact.value
          destination = "local/nops_oci.tar"
          mode        = "file"
          options {
            archive = "false"
          }
        }
      }

      config {
        image = var.image
        load  = var.image_archive == "" ? "" : "nops_oci.tar"
        # Published on the host's address, TCP and UDP.
        ports = ["http", "rpc", "serf"]
        # The image's entrypoint is /nops; these replace its command.
        args = concat([
          "serve",
          "-config", "$${NOMAD_SECRETS_DIR}/nops.hcl",
          "-config", "$${NOMAD_TASK_DIR}/join.hcl",
          "-node", "nops-$${NOMAD_SHORT_ALLOC_ID}",
          "-data-dir", "$${NOMAD_ALLOC_DIR}/data",
          "-bind", "0.0.0.0",
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
        uid         = 65532
        gid         = 65532
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
        uid         = 65532
        gid         = 65532
      }

      # The CA, certificate and key: a server reads them again on SIGHUP,
      # which the driver sends into the container.
      template {
        data          = "{{ with nomadVar \"nomad/jobs/nops\" }}{{ .ca }}{{ end }}"
        destination   = "secrets/ca.pem"
        perms         = "600"
        uid           = 65532
        gid           = 65532
        change_mode   = "signal"
        change_signal = "SIGHUP"
      }
      template {
        data          = "{{ with nomadVar \"nomad/jobs/nops\" }}{{ .cert }}{{ end }}"
        destination   = "secrets/server.pem"
        perms         = "600"
        uid           = 65532
        gid           = 65532
        change_mode   = "signal"
        change_signal = "SIGHUP"
      }
      template {
        data          = "{{ with nomadVar \"nomad/jobs/nops\" }}{{ .key }}{{ end }}"
        destination   = "secrets/server-key.pem"
        perms         = "600"
        uid           = 65532
        gid           = 65532
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
        uid         = 65532
        gid         = 65532
        change_mode = "noop"
      }

      resources {
        cpu    = 200
        memory = 256
      }
    }
  }
}
