package agent

import (
	"context"
	"net/http/httptrace"
)

// connTrace records that a forwarded request got a connection, after which
// it may have reached the leader and must not be retried.
type connTrace struct{ onConn func() }

func withConnTrace(ctx context.Context, t *connTrace) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteHeaders: func() { t.onConn() },
	})
}
