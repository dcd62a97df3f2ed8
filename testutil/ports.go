package testutil

import (
	"fmt"
	"net"
	"testing"
)

// FreePorts returns n distinct ports on 127.0.0.1 that were free for both
// TCP and UDP when it returned. All n are held open together while they are
// picked, so they never repeat within one call.
//
// Another process can still take a port between this call and its use; the
// agent helpers of this package detect "address already in use" and start
// again on new ports. Callers that bind the ports themselves should prefer
// listening on port 0.
func FreePorts(t testing.TB, n int) []int {
	t.Helper()
	ports, err := freePorts(n)
	if err != nil {
		t.Fatalf("testutil: %v", err)
	}
	return ports
}

func freePorts(n int) ([]int, error) {
	if n <= 0 {
		return nil, fmt.Errorf("free ports: count must be positive, got %d", n)
	}

	var closers []func() error
	defer func() {
		for _, c := range closers {
			_ = c()
		}
	}()

	ports := make([]int, 0, n)
	for attempts := 0; len(ports) < n; attempts++ {
		// A port taken on UDP is rare; 50 misses per port wanted mean
		// something else is wrong.
		if attempts > 50*n {
			return nil, fmt.Errorf("free ports: found only %d of %d after %d attempts", len(ports), n, attempts)
		}

		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("free ports: listening on a TCP port: %w", err)
		}
		closers = append(closers, l.Close)
		port := l.Addr().(*net.TCPAddr).Port

		// Serf and DNS listen on UDP too: the port must be free on both.
		pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		closers = append(closers, pc.Close)
		ports = append(ports, port)
	}
	return ports, nil
}

// ClosedAddress returns an HTTP address on 127.0.0.1 where nothing
// listens: a port that was free a moment ago (see FreePorts on the race).
func ClosedAddress(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("testutil: %v", err)
	}
	addr := "http://" + ln.Addr().String()
	ln.Close()
	return addr
}
