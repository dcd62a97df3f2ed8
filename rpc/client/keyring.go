package client

import (
	"context"
	"net/http"
)

// KeyringResponse is what every server answered to a gossip keyring
// operation. Keys are shown by fingerprint ("sha256:" and 16 hex digits of
// the SHA-256 of the key's bytes), never in full.
type KeyringResponse struct {
	Keys        map[string]int    `json:"keys"`
	PrimaryKeys map[string]int    `json:"primary_keys"`
	NumNodes    int               `json:"num_nodes"`
	NumResp     int               `json:"num_resp"`
	NumErr      int               `json:"num_err"`
	Messages    map[string]string `json:"messages,omitempty"`
}

// KeyringOp is the body of a keyring change: a base64 gossip key.
type KeyringOp struct {
	Key string `json:"key"`
}

// KeyringList lists the gossip keys installed on the servers.
func (c *Client) KeyringList(ctx context.Context) (*KeyringResponse, error) {
	var out KeyringResponse
	if _, err := c.get(ctx, "/v1/operator/keyring", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// KeyringInstall installs a gossip key on every server, without using it.
func (c *Client) KeyringInstall(ctx context.Context, key string) (*KeyringResponse, error) {
	return c.keyringChange(ctx, http.MethodPost, "/v1/operator/keyring/install", key)
}

// KeyringUse makes an installed key the one every server encrypts with.
func (c *Client) KeyringUse(ctx context.Context, key string) (*KeyringResponse, error) {
	return c.keyringChange(ctx, http.MethodPost, "/v1/operator/keyring/use", key)
}

// KeyringRemove removes a key that is not in use from every server.
func (c *Client) KeyringRemove(ctx context.Context, key string) (*KeyringResponse, error) {
	return c.keyringChange(ctx, http.MethodDelete, "/v1/operator/keyring", key)
}

func (c *Client) keyringChange(ctx context.Context, method, path, key string) (*KeyringResponse, error) {
	var out KeyringResponse
	if err := c.write(ctx, method, path, nil, KeyringOp{Key: key}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
