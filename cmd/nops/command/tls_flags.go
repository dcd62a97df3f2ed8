package command

import "flag"

// Environment variables of the TLS options of the client commands.
const (
	EnvCACert        = "NOPS_CACERT"
	EnvClientCert    = "NOPS_CLIENT_CERT"
	EnvClientKey     = "NOPS_CLIENT_KEY"
	EnvTLSServerName = "NOPS_TLS_SERVER_NAME"
)

// registerTLS adds the TLS options of an https:// address.
func (f *apiFlags) registerTLS(m *runner, fs *flag.FlagSet) {
	env := func(name string) string {
		v, _ := m.lookupEnv(name)
		return v
	}
	fs.StringVar(&f.tls.CACert, "ca-cert", env(EnvCACert), "")
	fs.StringVar(&f.tls.ClientCert, "client-cert", env(EnvClientCert), "")
	fs.StringVar(&f.tls.ClientKey, "client-key", env(EnvClientKey), "")
	fs.StringVar(&f.tls.ServerName, "tls-server-name", env(EnvTLSServerName), "")
}
