# Nops server configuration, installed by the nops package as
# /etc/nops.d/nops.hcl. `nops serve -config /etc/nops.d/` loads every *.hcl
# and *.json file of the directory in lexical order, so a later file (say
# 50-local.hcl) can add to this one or override it. `nops serve -h` lists
# every setting; docs/production.md explains them.
#
# It is secure by default and does not start until three things exist:
#
#   1. TLS files under /etc/nops.d/tls (mutual TLS between the servers, HTTPS
#      for the API), made with:
#        nops tls ca create                 # once per cluster, keep the CA key offline
#        nops tls cert create -server       # once per server
#      then copied to the paths below, readable by the nops group.
#   2. The gossip encryption key, the same on every server: put
#        NOPS_ENCRYPT=<output of nops operator gossip keygen>
#      in /etc/nops.d/nops.env (mode 0600, read by systemd only), not here.
#   3. The other servers: set retry_join below (or a consul block).
#
# Check it with `nops serve -config /etc/nops.d/ -validate` (with
# NOPS_ENCRYPT set), then start it: systemctl enable --now nops. The first
# server up creates the first management token with `nops acl bootstrap`.

data_dir         = "/var/lib/nops"
bootstrap_expect = 3
# retry_join     = ["10.0.1.11", "10.0.1.12", "10.0.1.13"]
# nomad_addr     = "https://nomad.service.consul:4646"

# Gossip encryption is on: a server refuses to start without a key (from
# NOPS_ENCRYPT above, or an encrypt = "..." line in a root-only file of
# this directory). disable_gossip_encryption = true would turn it off.

# ACLs are on: API requests need a token (docs/acl.md).
acl {
  enabled = true
}

tls {
  http                   = true
  rpc                    = true
  ca_file                = "/etc/nops.d/tls/nops-agent-ca.pem"
  cert_file              = "/etc/nops.d/tls/global-server-nops.pem"
  key_file               = "/etc/nops.d/tls/global-server-nops-key.pem"
  verify_server_hostname = true
}
