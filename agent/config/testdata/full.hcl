data_dir         = "/var/lib/nops"
bind             = "10.0.0.5"
http_port        = 8650
bootstrap_expect = 3
retry_join       = ["10.0.0.6", "10.0.0.7:9652"]
namespaces       = ["default", "web"]
drift_interval   = "2m"
default_policy   = "approval"
log_level        = "DEBUG"
redact_keys      = ["Vault", "dsn"]
region           = "eu-west"
encrypt          = "pUqJrVyVRj5jsiYEkM/tFQYfWyJIv4s3XkvDwy7Cu5s="

repository "platform" {
  url           = "https://git.example.com/platform.git"
  branch        = "prod"
  path          = "jobs"
  poll_interval = "1m"
  web_url       = "https://git.example.com/platform"

  auth {
    username  = "nops"
    token_env = "GIT_TOKEN"
  }
}

repository "apps" {
  url = "git@git.example.com:apps.git"

  auth {
    ssh_key_file         = "/etc/nops/id_ed25519"
    ssh_known_hosts_file = "/etc/nops/known_hosts"
  }
}

consul {
  service_name = "nops-prod"
}

acl {
  enabled   = true
  token_ttl = "8h"
}

tls {
  http                   = true
  rpc                    = true
  ca_file                = "/etc/nops/ca.pem"
  cert_file              = "/etc/nops/server.pem"
  key_file               = "/etc/nops/server-key.pem"
  verify_incoming        = true
  verify_server_hostname = true
}

notify "slack" {
  kind    = "slack"
  url_env = "SLACK_URL"
  events  = ["pending_approval", "failed"]
}

notify "audit" {
  kind = "webhook"
  url  = "https://audit.example.com/nops"
}

webhook {
  secret_env = "NOPS_WEBHOOK_SECRET"
}
