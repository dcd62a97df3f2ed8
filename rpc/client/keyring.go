package client

import (
	"context"
	"github.com/nops-dev/nops/structs"
	"net/http"
)

// KeyringList lists the gossip keys installed on the servers.
func (c *Client) KeyringList(ctx context.Context) (*structs.KeyringResponse, error) {
	var out structs.KeyringResponse
	if _, err := c.get(ctx, "/v1/operator/keyring", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// KeyringInstall installs a gossip key on every server, without using it.
func (c *Client) KeyringInstall(ctx context.Context, key string) (*structs.KeyringResponse, error) {
	return c.keyringChange(ctx, http.MethodPost, "/v1/operator/keyring/install", key)
}

// KeyringUse makes an installed key the one every server encrypts with.
func (c *Client) KeyringUse(ctx context.Context, key string) (*structs.KeyringResponse, error) {
	return c.keyringChange(ctx, http.MethodPost, "/v1/operator/keyring/use", key)
}

// KeyringRemove removes a key that is not in use from every server.
func (c *Client) KeyringRemove(ctx context.Context, key string) (*structs.KeyringResponse, error) {
	return c.keyringChange(ctx, http.MethodDelete, "/v1/operator/keyring", key)
}

func (c *Client) keyringChange(ctx context.Context, method, path, key string) (*structs.KeyringResponse, error) {
	var out structs.KeyringResponse
	if err := c.write(ctx, method, path, nil, structs.KeyringOp{Key: key}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
