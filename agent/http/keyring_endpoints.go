package agenthttp

import (
	"net/http"

	"github.com/nops-dev/nops/structs"
)

// keyringList answers GET /v1/operator/keyring: the gossip keys every
// server has installed and uses.
func (a *operatorAPI) keyringList(_ http.ResponseWriter, _ *http.Request) (any, error) {
	return a.s.Keyring("list", "")
}

// keyringChange answers the keyring changes: install, use and remove of
// the key in the body ({"key": "<base64>"}), on every server.
func (a *operatorAPI) keyringChange(op string) handlerFunc {
	return func(_ http.ResponseWriter, r *http.Request) (any, error) {
		var body structs.KeyringOp
		if err := decode(r, &body); err != nil {
			return nil, err
		}
		if body.Key == "" {
			return nil, badRequest("key: the base64 gossip key is required")
		}
		return a.s.Keyring(op, body.Key)
	}
}
