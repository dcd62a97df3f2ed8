package client

import (
	"context"
	"net/http"

	"github.com/nops-dev/nops/structs"
)

// Preview asks the leader what Nops would do with a watched repository at
// ref (a branch or tag name, or a full commit hash), without writing
// anything (SPEC section 19).
func (c *Client) Preview(ctx context.Context, repository, ref string) (*structs.Preview, error) {
	var out structs.Preview
	req := &structs.PreviewRequest{Repository: repository, Ref: ref}
	if err := c.write(ctx, http.MethodPost, "/v1/preview", nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
