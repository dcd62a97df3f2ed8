package agent_test

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nops-dev/nops/rpc/client"
	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// streamed collects the events of one stream.
type streamed struct {
	mu     sync.Mutex
	events []*structs.Event
}

func (s *streamed) add(e *structs.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.events = append(s.events, e)
	return nil
}

func (s *streamed) list() []*structs.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*structs.Event(nil), s.events...)
}

// TestEventStreamOnFollower follows the audit log on a follower of a real
// 3-server cluster while the leader writes, resumes after a break without
// repeats, and refuses bad input and streams past the cap.
func TestEventStreamOnFollower(t *testing.T) {
	c := nopstest.StartCluster(t, 3, nopstest.WithoutReconcilers())
	leader := c.WaitForLeader(20 * time.Second)
	follower := c.Followers()[0]
	api, err := client.New(client.Config{Address: follower.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	got := &streamed{}
	done := make(chan error, 1)
	go func() { done <- api.Events().Stream(ctx, 0, client.StreamFilter{}, got.add) }()

	for _, job := range []string{"a", "b"} {
		if code, body := leader.Do("POST", "/v1/job/default/"+job+"/pause", map[string]string{"reason": "r-" + job}, nil); code != http.StatusOK {
			t.Fatalf("pause: %d %s", code, body)
		}
	}
	testutil.WaitForResult(t, 10*time.Second, func() (bool, error) {
		return len(got.list()) == 2, fmt.Errorf("follower streamed %d events", len(got.list()))
	})
	cancel()
	<-done
	first := got.list()
	if first[0].Object != "default/a" || first[1].Object != "default/b" || first[1].Seq != first[0].Seq+1 {
		t.Fatalf("streamed %+v %+v", first[0], first[1])
	}

	// Resume with Last-Event-ID: only what came after.
	leader.Do("POST", "/v1/job/default/c/pause", map[string]string{"reason": "r-c"}, nil)
	req, _ := http.NewRequest("GET", follower.URL+"/v1/events/stream", nil)
	req.Header.Set("Last-Event-ID", fmt.Sprint(first[1].Seq))
	rctx, rcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer rcancel()
	resp, err := http.DefaultClient.Do(req.WithContext(rctx))
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	sc := bufio.NewScanner(resp.Body)
	var lines []string
	for sc.Scan() && len(lines) < 3 {
		if sc.Text() != "" {
			lines = append(lines, sc.Text())
		}
	}
	resp.Body.Close()
	if len(lines) < 3 || lines[0] != fmt.Sprintf("id: %d", first[1].Seq+1) || lines[1] != "event: pause" ||
		!strings.Contains(lines[2], `"object":"default/c"`) {
		t.Fatalf("resumed stream starts %q", lines)
	}

	// Bad input is refused and names the problem.
	if code, body := follower.Do("GET", "/v1/events/stream?index=minus-one", nil, nil); code != http.StatusBadRequest || !strings.Contains(body, "minus-one") {
		t.Errorf("bad index: %d %s", code, body)
	}

	// The number of open streams is capped.
	sctx, scancel := context.WithCancel(context.Background())
	defer scancel()
	var open sync.WaitGroup
	for i := 0; i < 64; i++ {
		r, _ := http.NewRequestWithContext(sctx, "GET", follower.URL+"/v1/events/stream?index=999999", nil)
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("stream %d: %d", i, resp.StatusCode)
		}
		open.Add(1)
		go func() {
			defer open.Done()
			defer resp.Body.Close()
			_, _ = bufio.NewReader(resp.Body).ReadString('\x00')
		}()
	}
	if code, body := follower.Do("GET", "/v1/events/stream", nil, nil); code != http.StatusTooManyRequests {
		t.Errorf("stream past the cap: %d %s", code, body)
	}
	scancel()
	open.Wait()
	// Closed streams free their places.
	testutil.WaitForResult(t, 5*time.Second, func() (bool, error) {
		r, _ := http.NewRequest("GET", follower.URL+"/v1/events/stream", nil)
		c2, cancel2 := context.WithCancel(context.Background())
		defer cancel2()
		resp, err := http.DefaultClient.Do(r.WithContext(c2))
		if err != nil {
			return false, err
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, fmt.Errorf("status %d", resp.StatusCode)
	})
}
