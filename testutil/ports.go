package testutil

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"testing"
)

// FreePorts returns n distinct ports on 127.0.0.1 that were free for both
// TCP and UDP when it returned. All n are held open together while they are
// picked, so they never repeat within one call.
//
// The ports are picked at random below the kernel's ephemeral range
// (ip_local_port_range, 32768 and up by default), where the local port of
// every outgoing connection comes from: a port picked there (as listening
// on port 0 would) may be taken by any connection of any process, tests
// running in parallel included, before the caller binds it — a CI run saw
// a server's restart port taken that way. Where that range cannot be read
// or leaves too little below it, the kernel picks (port 0).
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

	lo, hi := portRange()
	ports := make([]int, 0, n)
	for attempts := 0; len(ports) < n; attempts++ {
		// A port taken on UDP is rare; 50 misses per port wanted mean
		// something else is wrong.
		if attempts > 50*n {
			return nil, fmt.Errorf("free ports: found only %d of %d after %d attempts", len(ports), n, attempts)
		}

		want := 0
		if lo < hi {
			want = lo + rand.IntN(hi-lo)
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", want))
		if err != nil && want != 0 {
			continue // taken
		}
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

// portRange is where freePorts picks: from 10000 to the start of the
// ephemeral range, or lo == hi (let the kernel pick) when that range
// cannot be read or starts below 12000.
func portRange() (lo, hi int) {
	raw, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	var first, last int
	if _, err := fmt.Sscan(string(raw), &first, &last); err != nil || first < 12000 {
		return 0, 0
	}
	return 10000, first
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
