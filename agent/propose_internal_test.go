package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	dto "github.com/prometheus/client_model/go"

	"github.com/nops-dev/nops/structs"
)

// fakeFuture is an ApplyFuture the test resolves. Like Raft's, it hands
// its error to one reader: a reader waiting at the same time as another
// reads the closed channel, and sees success.
type fakeFuture struct {
	buf   string
	errCh chan error
	// resp, when set, is the answer; else the entry's bytes are.
	resp any
}

func (f *fakeFuture) resolve(err error) {
	f.errCh <- err
	close(f.errCh)
}

func (f *fakeFuture) Error() error  { return <-f.errCh }
func (f *fakeFuture) Index() uint64 { return 7 }
func (f *fakeFuture) Response() interface{} {
	if f.resp != nil {
		return f.resp
	}
	return f.buf
}

// fakeRaft hands each entry applied to the test, in order.
type fakeRaft struct {
	calls chan *fakeFuture
}

// next returns the next entry the proposer handed to Raft, or fails the
// test after 5s.
func (r *fakeRaft) next(t *testing.T, what string) *fakeFuture {
	t.Helper()
	select {
	case f := <-r.calls:
		return f
	case <-time.After(5 * time.Second):
		t.Fatalf("no Raft apply of %s", what)
		return nil
	}
}

func (r *fakeRaft) apply(buf []byte, _ time.Duration) raft.ApplyFuture {
	f := &fakeFuture{buf: string(buf), errCh: make(chan error, 1)}
	r.calls <- f
	return f
}

// runProposer runs a proposer over fr with the given group wait (zero
// keeps the default). stop shuts it down and returns once its loop ended,
// or fails the test after 5s (a reader of an unanswered future must not
// hold it); the test's cleanup calls it too.
func runProposer(t *testing.T, fr *fakeRaft, wait time.Duration) (p *proposer, stop func()) {
	t.Helper()
	shutdown := make(chan struct{})
	p = newProposer(fr.apply, shutdown, structs.ErrShuttingDown)
	if wait > 0 {
		p.groupWait = wait
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go p.run(&wg)
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(shutdown)
			stopped := make(chan struct{})
			go func() { wg.Wait(); close(stopped) }()
			select {
			case <-stopped:
			case <-time.After(5 * time.Second):
				t.Fatal("the proposer did not stop within 5s of its shutdown")
			}
		})
	}
	t.Cleanup(stop)
	return p, stop
}

// TestProposer_GroupsWhileOneIsInFlight: a proposal that finds the
// proposer idle goes to Raft at once; the proposals that arrive while its
// group is in flight wait, and go to Raft together, without waiting for one
// another, once it is applied. Each caller gets its own entry's outcome.
func TestProposer_GroupsWhileOneIsInFlight(t *testing.T) {
	fr := &fakeRaft{calls: make(chan *fakeFuture, 100)}
	p, _ := runProposer(t, fr, 0)

	type outcome struct {
		buf string
		err error
	}
	results := make(chan outcome, 100)
	submit := func(buf string) {
		go func() {
			r := p.propose([]byte(buf))
			err := r.err
			if got, _ := r.resp.(string); err == nil && (got != buf || r.index != 7) {
				err = fmt.Errorf("caller of %q got the outcome %+v", buf, r)
			}
			results <- outcome{buf, err}
		}()
	}

	submit("first")
	first := fr.next(t, "a lone proposal")
	if first.buf != "first" {
		t.Fatalf("applied %q, want first", first.buf)
	}
	const waiting = 20
	for i := range waiting {
		submit(fmt.Sprintf("w-%d", i))
	}
	// The proposals queue while the first group is in flight.
	deadline := time.Now().Add(5 * time.Second)
	for len(p.queue) < waiting && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if n := len(p.queue); n != waiting {
		t.Fatalf("%d proposals queued behind the group in flight, want %d", n, waiting)
	}
	select {
	case f := <-fr.calls:
		t.Fatalf("%q went to Raft while the group before it was in flight", f.buf)
	case <-time.After(50 * time.Millisecond):
	}
	first.resolve(errors.New("refused"))
	// The next group goes whole before any of it is applied.
	group := map[string]*fakeFuture{}
	for range waiting {
		f := fr.next(t, "the queued group")
		group[f.buf] = f
	}
	for i := range waiting {
		if group[fmt.Sprintf("w-%d", i)] == nil {
			t.Fatalf("w-%d not in the group: %v", i, group)
		}
	}
	for _, f := range group {
		f.resolve(nil)
	}
	seen := map[string]bool{}
	for range waiting + 1 {
		o := <-results
		switch {
		case o.buf == "first" && (o.err == nil || o.err.Error() != "refused"):
			t.Fatalf("first: err %v, want its own refusal", o.err)
		case o.buf != "first" && o.err != nil:
			t.Fatalf("%s: %v", o.buf, o.err)
		}
		seen[o.buf] = true
	}
	if len(seen) != waiting+1 {
		t.Fatalf("outcomes for %d proposals, want %d", len(seen), waiting+1)
	}
}

// TestProposer_Shutdown: a proposal after shutdown is refused, not left
// waiting.
func TestProposer_Shutdown(t *testing.T) {
	fr := &fakeRaft{calls: make(chan *fakeFuture, 1)}
	p, stop := runProposer(t, fr, 0)
	stop()
	if r := p.propose([]byte("late")); !errors.Is(r.err, structs.ErrShuttingDown) {
		t.Fatalf("propose after shutdown: %v, want %v", r.err, structs.ErrShuttingDown)
	}
}

// TestProposer_StuckGroupHoldsNoOneForEver: a group Raft keeps waiting
// holds up the next one for groupWait only; each caller still gets its own
// outcome once Raft answers.
func TestProposer_StuckGroupHoldsNoOneForEver(t *testing.T) {
	fr := &fakeRaft{calls: make(chan *fakeFuture, 10)}
	p, _ := runProposer(t, fr, 50*time.Millisecond)
	results := make(chan applyResult, 2)
	go func() { results <- p.propose([]byte("stuck")) }()
	stuck := <-fr.calls
	start := time.Now()
	go func() { results <- p.propose([]byte("next")) }()
	var next *fakeFuture
	select {
	case next = <-fr.calls:
	case <-time.After(5 * time.Second):
		t.Fatal("a stuck group held up the next one for good")
	}
	if waited := time.Since(start); waited < p.groupWait/2 {
		t.Fatalf("the next group went after %s, before the wait for the stuck one (%s)", waited, p.groupWait)
	}
	next.resolve(nil)
	stuck.resolve(errors.New("lost"))
	for range 2 {
		r := <-results
		if got := r.resp; (got == "next") != (r.err == nil) {
			t.Fatalf("outcome %+v", r)
		}
	}
}

// TestProposer_ShutdownWithAnUnansweredFuture: Raft may leave a future it
// took unanswered when it shuts down. The proposer still stops (the
// server's shutdown does not hang on the reader), the caller of that
// proposal hears that its outcome is unknown (it may have been committed),
// and a proposal Raft never took is refused as not applied.
func TestProposer_ShutdownWithAnUnansweredFuture(t *testing.T) {
	fr := &fakeRaft{calls: make(chan *fakeFuture, 10)}
	// The group in flight holds the next one up for the whole test.
	p, stop := runProposer(t, fr, time.Hour)
	taken := make(chan applyResult, 1)
	go func() { taken <- p.propose([]byte("taken")) }()
	<-fr.calls // Raft took it, and never answers.
	// A second proposal waits behind the group in flight, never sent.
	queued := make(chan applyResult, 1)
	go func() { queued <- p.propose([]byte("queued")) }()
	deadline := time.Now().Add(5 * time.Second)
	for len(p.queue) == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	stop()
	if r := <-taken; !errors.Is(r.err, errOutcomeUnknown) {
		t.Fatalf("a proposal Raft took: %v, want %v", r.err, errOutcomeUnknown)
	}
	if r := <-queued; !errors.Is(r.err, structs.ErrShuttingDown) {
		t.Fatalf("a proposal Raft never took: %v, want %v", r.err, structs.ErrShuttingDown)
	}
}

// TestProposer_BatchEntry: once every server applies batch entries, a
// group goes to Raft as batch entries of up to maxBatchBytes (a write as
// large goes alone), and each caller gets its own write's answer from the
// entry's list; a batch refused whole answers each of its writes with the
// refusal, and a list that does not match the writes is an error for each.
// While some server is too old, each write goes alone.
func TestProposer_BatchEntry(t *testing.T) {
	fr := &fakeRaft{calls: make(chan *fakeFuture, 100)}
	// No group goes for want of an answer: the test answers each.
	p, _ := runProposer(t, fr, time.Minute)
	var allow atomic.Bool
	allow.Store(true)
	p.canBatch = allow.Load

	results := map[string]chan applyResult{}
	submit := func(buf string) {
		t.Helper()
		ch := make(chan applyResult, 1)
		results[buf] = ch
		queued := len(p.queue)
		go func() { ch <- p.propose([]byte(buf)) }()
		// One at a time, so that the queue holds them in this order.
		deadline := time.Now().Add(5 * time.Second)
		for len(p.queue) == queued && len(fr.calls) == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	outcome := func(buf string) applyResult {
		t.Helper()
		select {
		case r := <-results[buf]:
			return r
		case <-time.After(5 * time.Second):
			t.Fatalf("no outcome for %.10q", buf)
			return applyResult{}
		}
	}
	split := func(f *fakeFuture) []string {
		t.Helper()
		if f.buf == "" || structs.MessageType(f.buf[0]) != structs.BatchRequestType {
			t.Fatalf("entry %.20q is not a batch entry", f.buf)
		}
		parts, err := structs.SplitBatch([]byte(f.buf[1:]))
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, b := range parts {
			out = append(out, string(b))
		}
		return out
	}

	submit("first")
	first := fr.next(t, "the next entry")
	big := strings.Repeat("x", maxBatchBytes+1)
	create := string([]byte{byte(structs.DeploymentCreateRequestType)}) + "create"
	for _, b := range []string{"a", "b", big, "c", "c2", create, "c3"} {
		submit(b)
	}
	first.resolve(nil)
	if r := outcome("first"); r.err != nil || r.resp != "first" {
		t.Fatalf("first: %+v", r)
	}
	// nextBatch takes the next entry, a batch that must hold bufs.
	nextBatch := func(which string, bufs ...string) *fakeFuture {
		t.Helper()
		f := fr.next(t, "the next entry")
		if got := split(f); !slices.Equal(got, bufs) {
			t.Fatalf("%s entry holds %q, want %q", which, got, bufs)
		}
		return f
	}
	// nextAlone takes the next entry, which must hold buf alone.
	nextAlone := func(which, buf string) *fakeFuture {
		t.Helper()
		f := fr.next(t, "the next entry")
		if f.buf != buf {
			t.Fatalf("%s entry is %.20q, want %.20q alone", which, f.buf, buf)
		}
		return f
	}
	batch := nextBatch("first", "a", "b")
	alone := nextAlone("second", big)
	last := nextBatch("third", "c", "c2")
	// A deployment create goes alone (the FSM takes one per entry), in
	// its place.
	alone2 := nextAlone("fourth", create)
	tail := nextAlone("fifth", "c3")
	last.resp = []any{nil, nil}
	refusal := errors.New("b refused")
	batch.resp = []any{nil, refusal}
	batch.resolve(nil)
	alone.resolve(nil)
	last.resolve(nil)
	if r := outcome("a"); r.err != nil || r.resp != nil || r.index != 7 {
		t.Fatalf("a: %+v, want no answer at index 7", r)
	}
	if r := outcome("b"); r.err != nil || r.resp != refusal {
		t.Fatalf("b: %+v, want its own refusal", r)
	}
	if r := outcome(big); r.err != nil || r.resp != big {
		t.Fatalf("the large write: err %v", r.err)
	}
	for _, b := range []string{"c", "c2"} {
		if r := outcome(b); r.err != nil || r.resp != nil {
			t.Fatalf("%s: %+v", b, r)
		}
	}
	alone2.resolve(nil)
	tail.resolve(nil)
	if r := outcome(create); r.err != nil || r.resp != create {
		t.Fatalf("the create: %+v", r)
	}
	if r := outcome("c3"); r.err != nil || r.resp != "c3" {
		t.Fatalf("c3: %+v", r)
	}

	// group queues writes behind one in flight, so that they go to Raft
	// together once it is applied.
	group := func(bufs ...string) {
		t.Helper()
		submit("hold")
		hold := fr.next(t, "the next entry")
		for _, b := range bufs {
			submit(b)
		}
		hold.resolve(nil)
		outcome("hold")
	}

	// A batch refused whole, and a list that does not match.
	for _, tc := range []struct {
		resp any
		want string
	}{
		{errors.New("malformed batch entry"), "malformed batch entry"},
		{[]any{nil}, "answered []interface {} for 2 writes"},
	} {
		group("d", "e")
		f := fr.next(t, "the next entry")
		if got := split(f); !slices.Equal(got, []string{"d", "e"}) {
			t.Fatalf("batch entry holds %q, want d and e", got)
		}
		f.resp = tc.resp
		f.resolve(nil)
		for _, b := range []string{"d", "e"} {
			r := outcome(b)
			err, _ := r.resp.(error)
			if r.err != nil {
				err = r.err
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%s: %+v, want an answer naming %q", b, r, tc.want)
			}
		}
	}

	// A server too old for batch entries: each write goes alone.
	allow.Store(false)
	group("f", "g")
	for _, want := range []string{"f", "g"} {
		f := fr.next(t, "the next entry")
		if f.buf != want {
			t.Fatalf("entry %.20q, want %s alone", f.buf, want)
		}
		f.resolve(nil)
		if r := outcome(want); r.err != nil || r.resp != want {
			t.Fatalf("%s: %+v", want, r)
		}
	}
	var m dto.Metric
	if err := p.writes.Write(&m); err != nil {
		t.Fatal(err)
	}
	if got := m.GetCounter().GetValue(); got != 17 {
		t.Fatalf("writes counted %v, want 17", got)
	}
}

// TestProposer_NextGroupGoesOnCommit: the group behind one in flight goes
// to Raft as soon as the FSM starts to apply (the one in flight is
// committed), before its futures are answered; a signal from before a
// group was sent does not let the next one go, and at most two groups are
// in Raft whatever the signals.
func TestProposer_NextGroupGoesOnCommit(t *testing.T) {
	fr := &fakeRaft{calls: make(chan *fakeFuture, 100)}
	p, _ := runProposer(t, fr, time.Minute)
	results := make(chan applyResult, 10)
	submit := func(buf string) {
		queued := len(p.queue)
		go func() { results <- p.propose([]byte(buf)) }()
		deadline := time.Now().Add(5 * time.Second)
		for len(p.queue) == queued && len(fr.calls) == 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
	}
	quiet := func(what string) {
		t.Helper()
		select {
		case f := <-fr.calls:
			t.Fatalf("%.20q went to Raft %s", f.buf, what)
		case <-time.After(50 * time.Millisecond):
		}
	}

	// A stale signal: the FSM applied something while nothing was in
	// flight.
	p.committed()
	submit("first")
	first := fr.next(t, "a lone write")
	submit("second")
	quiet("while the group before it was neither committed nor applied")
	p.committed()
	second := fr.next(t, "the write behind a committed group")
	if second.buf != "second" {
		t.Fatalf("applied %q, want second", second.buf)
	}
	// A second signal (an earlier group's entry, say) does not put a
	// third group in Raft while the first is unanswered.
	submit("third")
	p.committed()
	quiet("while two groups were in Raft")
	first.resolve(nil)
	third := fr.next(t, "the write behind two groups, once the first is answered")
	if third.buf != "third" {
		t.Fatalf("applied %q, want third", third.buf)
	}
	second.resolve(nil)
	third.resolve(nil)
	for range 3 {
		select {
		case r := <-results:
			if r.err != nil {
				t.Fatal(r.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a caller got no outcome")
		}
	}
}
