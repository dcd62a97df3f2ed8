package config

import (
	"fmt"
)

// Resolve returns a copy of a whose Password, Token and SSHKeyPassphrase
// are read from the environment variables named by PasswordEnv, TokenEnv
// and SSHKeyPassphraseEnv, when those are set. A named variable that is
// unset or empty is an error. A nil a resolves to nil.
func (a *RepoAuth) Resolve(lookupEnv func(string) (string, bool)) (*RepoAuth, error) {
	if a == nil {
		return nil, nil
	}
	out := *a
	var err error
	if out.Password, err = fromEnv(lookupEnv, out.Password, out.PasswordEnv, "password_env"); err != nil {
		return nil, err
	}
	if out.Token, err = fromEnv(lookupEnv, out.Token, out.TokenEnv, "token_env"); err != nil {
		return nil, err
	}
	if out.SSHKeyPassphrase, err = fromEnv(lookupEnv, out.SSHKeyPassphrase, out.SSHKeyPassphraseEnv, "ssh_key_passphrase_env"); err != nil {
		return nil, err
	}
	return &out, nil
}

// ResolveURL returns the URL of the target, read from the environment
// variable named by URLEnv when that is set.
func (n NotifyConfig) ResolveURL(lookupEnv func(string) (string, bool)) (string, error) {
	u, err := fromEnv(lookupEnv, n.URL, n.URLEnv, "url_env")
	if err != nil {
		return "", fmt.Errorf("notify %q: %w", n.Name, err)
	}
	return u, nil
}

// ResolveSecret returns the webhook HMAC secret from the environment
// variable named by SecretEnv, or "" when SecretEnv is not set.
func (w WebhookConfig) ResolveSecret(lookupEnv func(string) (string, bool)) (string, error) {
	s, err := fromEnv(lookupEnv, "", w.SecretEnv, "secret_env")
	if err != nil {
		return "", fmt.Errorf("webhook: %w", err)
	}
	return s, nil
}

// fromEnv returns the variable named env when env is set, else direct.
func fromEnv(lookupEnv func(string) (string, bool), direct, env, key string) (string, error) {
	if env == "" {
		return direct, nil
	}
	if lookupEnv == nil {
		return "", fmt.Errorf("%s: environment variable %s is not set", key, env)
	}
	s, ok := lookupEnv(env)
	if !ok || s == "" {
		return "", fmt.Errorf("%s: environment variable %s is not set", key, env)
	}
	return s, nil
}

// KnownHosts is the known_hosts file that checks an SSH server's host key:
// known_hosts_file or ssh_known_hosts_file, whichever is set ("" for the
// SSH_KNOWN_HOSTS variable or ~/.ssh/known_hosts).
func (a *RepoAuth) KnownHosts() string {
	if a.KnownHostsFile != "" {
		return a.KnownHostsFile
	}
	return a.SSHKnownHostsFile
}
