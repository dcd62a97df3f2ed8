data_dir                  = "/var/lib/nops"
bootstrap_expect          = 1
disable_gossip_encryption = true
insecure_rpc              = true
namespaces                = ["default", "web"]

nomad "staging" {
  address = "http://nomad.staging.example.com:4646"
}

nomad "eu" {
  address         = "https://nomad.eu.example.com:4646"
  region          = "eu"
  namespaces      = ["*"]
  token_file      = "/run/secrets/nomad-eu"
  ca_file         = "/etc/nops/nomad-eu-ca.pem"
  cert_file       = "/etc/nops/nomad-eu.pem"
  key_file        = "/etc/nops/nomad-eu-key.pem"
  tls_server_name = "server.eu.nomad"
  ui_url          = "https://nomad.eu.example.com"
  requires        = ["staging"]
  bake            = "30m"
}

repository "staging-jobs" {
  url     = "https://git.example.com/ops/jobs.git"
  path    = "staging"
  cluster = "staging"
}

repository "eu-jobs" {
  url     = "https://git.example.com/ops/jobs.git"
  path    = "eu"
  cluster = "eu"
}
