# Runs Nops as a Nomad job with the docker driver, from the Nops image
# (docs/image.md). It follows docs/nops.nomad.hcl, the exec-driver job:
# the same Task API socket instead of a Nomad address, the same ACL token,
# gossip key and RPC TLS material rendered from the Nomad Variable
# nomad/jobs/nops, the same arguments of nops serve (a test keeps the two
# files' templates and arguments the same); read that file's notes first.
# Only the task differs: the image instead of a binary on the node.
#
# The image runs as user 65532 (nops), not root: the templates are
# rendered for that user (uid, gid), the Task API socket of a task without
# a user is open to any user of the container, and the default data
# directory, the allocation's shared data directory, is writable by all.
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
#
# One server keeps its Raft state in the allocation. For three, the serf
# and RPC ports must be reachable from the other servers at the address
# each advertises: add them to the network block and the ports list, and
# pass -advertise (the node's address, ${attr.unique.network.ip-address})
# with -bootstrap-expect 3 and -retry-join, or use network_mode = "host".

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

variable "http_port" {
  description = "Port of the Nops API and dashboard on the node."
  type        = number
  default     = 4650
}

variable "serve_args" {
  description = "Further flags of nops serve. The default runs one server whose Raft state lives in the allocation; see the notes above for three."
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
        to     = 4650
      }
    }

    task "nops" {
      driver = "docker"

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
        ports = ["http"]
        # The image's entrypoint is /nops; these replace its command.
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
        uid         = 65532
        gid         = 65532
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
        uid         = 65532
        gid         = 65532
      }
      template {
        data        = "{{ with nomadVar \"nomad/jobs/nops\" }}{{ .ca }}{{ end }}"
        destination = "secrets/ca.pem"
        perms       = "600"
        uid         = 65532
        gid         = 65532
      }
      template {
        data        = "{{ with nomadVar \"nomad/jobs/nops\" }}{{ .cert }}{{ end }}"
        destination = "secrets/server.pem"
        perms       = "600"
        uid         = 65532
        gid         = 65532
      }
      template {
        data        = "{{ with nomadVar \"nomad/jobs/nops\" }}{{ .key }}{{ end }}"
        destination = "secrets/server-key.pem"
        perms       = "600"
        uid         = 65532
        gid         = 65532
      }

      resources {
        cpu    = 200
        memory = 256
      }
    }
  }
}
