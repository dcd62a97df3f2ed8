package client

import (
	"context"
	"errors"
	"net/http"

	"github.com/nops-dev/nops/structs"
)

// Windows is the part of the API on the sync windows that allow or deny
// deployments. Get it with Client.Windows.
type Windows struct {
	c *Client
}

// Windows returns the client of the sync windows that allow or deny
// deployments.
func (c *Client) Windows() *Windows { return &Windows{c: c} }

// List lists the sync windows.
func (w *Windows) List(ctx context.Context, q *QueryOptions) ([]*structs.SyncWindow, *QueryMeta, error) {
	var out []*structs.SyncWindow
	meta, err := w.c.get(ctx, "/v1/windows", nil, q, &out)
	return out, meta, err
}

// Info returns one sync window.
func (w *Windows) Info(ctx context.Context, name string, q *QueryOptions) (*structs.SyncWindow, *QueryMeta, error) {
	var out structs.SyncWindow
	meta, err := w.c.get(ctx, "/v1/window/"+seg(name), nil, q, &out)
	if err != nil {
		return nil, nil, err
	}
	return &out, meta, nil
}

// Put creates or replaces the sync window spec.Name and returns it as
// stored. The server validates it and lists every problem in the
// *APIError.
func (w *Windows) Put(ctx context.Context, spec *structs.WindowSpec) (*structs.SyncWindow, error) {
	if spec == nil || spec.Name == "" {
		return nil, errors.New("put window: the window needs a name")
	}
	var out *structs.SyncWindow
	if err := w.c.write(ctx, http.MethodPut, "/v1/window/"+seg(spec.Name), nil, spec, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Delete deletes a sync window.
func (w *Windows) Delete(ctx context.Context, name string) error {
	return w.c.write(ctx, http.MethodDelete, "/v1/window/"+seg(name), nil, nil, nil)
}
