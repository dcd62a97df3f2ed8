package client

import (
	"context"
	"github.com/nops-dev/nops/structs"
	"net/http"
)

// KeyringList lists the gossip keys installed on the servers.
func (o *Operator) KeyringList(ctx context.Context) (*structs.KeyringResponse, error) {
	var out structs.KeyringResponse
	if _, err := o.c.get(ctx, "/v1/operator/keyring", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// KeyringInstall installs a gossip key on every server, without using it.
func (o *Operator) KeyringInstall(ctx context.Context, key string) (*structs.KeyringResponse, error) {
	return o.keyringChange(ctx, http.MethodPost, "/v1/operator/keyring/install", key)
}

// KeyringUse makes an installed key the one every server encrypts with.
func (o *Operator) KeyringUse(ctx context.Context, key string) (*structs.KeyringResponse, error) {
	return o.keyringChange(ctx, http.MethodPost, "/v1/operator/keyring/use", key)
}

// KeyringRemove removes a key that is not in use from every server.
func (o *Operator) KeyringRemove(ctx context.Context, key string) (*structs.KeyringResponse, error) {
	return o.keyringChange(ctx, http.MethodDelete, "/v1/operator/keyring", key)
}

func (o *Operator) keyringChange(ctx context.Context, method, path, key string) (*structs.KeyringResponse, error) {
	var out structs.KeyringResponse
	if err := o.c.write(ctx, method, path, nil, structs.KeyringOp{Key: key}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
