package client

import (
	"context"
	"errors"
	"net/http"

	"github.com/nops-dev/nops/structs"
)

// Windows lists the sync windows.
func (c *Client) Windows(ctx context.Context, q *QueryOptions) ([]*structs.SyncWindow, *QueryMeta, error) {
	var out []*structs.SyncWindow
	meta, err := c.get(ctx, "/v1/windows", nil, q, &out)
	return out, meta, err
}

// Window returns one sync window.
func (c *Client) Window(ctx context.Context, name string, q *QueryOptions) (*structs.SyncWindow, *QueryMeta, error) {
	var out structs.SyncWindow
	meta, err := c.get(ctx, "/v1/window/"+seg(name), nil, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}

// PutWindow creates or replaces the sync window spec.Name and returns it as
// stored. The server validates it and lists every problem in the
// *APIError.
func (c *Client) PutWindow(ctx context.Context, spec *structs.WindowSpec) (*structs.SyncWindow, error) {
	if spec == nil || spec.Name == "" {
		return nil, errors.New("put window: the window needs a name")
	}
	var out *structs.SyncWindow
	if err := c.write(ctx, http.MethodPut, "/v1/window/"+seg(spec.Name), nil, spec, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// DeleteWindow deletes a sync window.
func (c *Client) DeleteWindow(ctx context.Context, name string) error {
	return c.write(ctx, http.MethodDelete, "/v1/window/"+seg(name), nil, nil, nil)
}
