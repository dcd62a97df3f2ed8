package client

import (
	"context"
	"net/http"

	"github.com/nops-dev/nops/structs"
)

// GC has the leader run a retention pass now and returns what it
// removed.
func (o *Operator) GC(ctx context.Context) (*structs.GCResult, error) {
	var out structs.GCResult
	if err := o.c.write(ctx, http.MethodPost, "/v1/operator/gc", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
