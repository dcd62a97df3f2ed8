package agent

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/nops-dev/nops/structs"
)

const (
	// aclGCMaxWait bounds the wait between two looks for expired tokens.
	aclGCMaxWait = time.Minute
	// aclGCBatch bounds the tokens one entry deletes, so that a burst of
	// expiries makes several small log entries rather than one huge one.
	aclGCBatch = 256
	// aclGCRetry is the wait after a failed delete (no leader yet, a full
	// Raft queue): soon enough that expired tokens do not pile up.
	aclGCRetry = 5 * time.Second
	// aclGCMinWait keeps the loop from spinning on a token that expires now.
	aclGCMinWait = 10 * time.Millisecond
)

// tokenLoop is a leader loop: it deletes expired tokens through Raft at
// their expiry (an expired token is refused before then already), and stops
// with the leadership.
func (r *retention) tokenLoop(ctx context.Context) {
	s := r.s
	logger := s.logger.Named("acl.gc")
	for {
		st := s.State()
		changed := st.Changed()
		index := st.ACL().Index()
		wait := aclGCMaxWait
		now := time.Now()
		tokens, err := st.ACL().Tokens()
		if err != nil {
			logger.Warn("list tokens", "error", err)
		}
		var expired []string
		for _, t := range tokens {
			switch {
			case t.Expired(now):
				expired = append(expired, t.AccessorID)
			case !t.ExpirationTime.IsZero():
				wait = min(wait, t.ExpirationTime.Sub(now))
			}
		}
		for len(expired) > 0 {
			n := min(len(expired), aclGCBatch)
			req := &structs.ACLDeleteRequest{
				WriteMeta: structs.WriteMeta{Time: now.UTC(), Actor: "nops"}, Names: expired[:n], IgnoreMissing: true,
			}
			if _, err := s.Apply(structs.ACLTokenDeleteRequestType, req); err != nil {
				logger.Warn("delete expired tokens", "error", err)
				wait = min(wait, aclGCRetry)
				break
			}
			logger.Info("deleted expired tokens", "count", n)
			expired = expired[n:]
		}
		timer := time.NewTimer(max(wait, aclGCMinWait))
	wait:
		for {
			select {
			case <-ctx.Done():
				timer.Stop()
				return
			case <-timer.C:
				break wait
			case <-changed:
				// A new token may expire sooner than the wait.
				st = s.State()
				changed = st.Changed()
				if st.ACL().Index() != index {
					timer.Stop()
					break wait
				}
			}
		}
	}
}

// checkACL refuses a peer whose acl.enabled differs from this server's: a
// cluster where some servers check tokens and others do not would let any
// request through the latter.
func (m *membership) checkACL(si serverInfo) error {
	mine := strconv.FormatBool(m.s.config.ACL.Enabled)
	if si.ACL != mine {
		return fmt.Errorf("server %s has acl.enabled = %s but this server has %s: every server of a cluster must agree on acl.enabled",
			si.Name, orUnset(si.ACL), mine)
	}
	return nil
}

func orUnset(s string) string {
	if s == "" {
		return "(unset)"
	}
	return s
}
