package failover_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil"
	"github.com/nops-dev/nops/testutil/nopstest"
)

const (
	// chaosRoundsEnv sets the number of rounds of TestPartition_Chaos;
	// make chaos runs chaosFullRounds.
	chaosRoundsEnv = "NOPS_CHAOS_ROUNDS"
	// chaosSeedEnv replays a run: the test prints its seed.
	chaosSeedEnv = "NOPS_CHAOS_SEED"
	// chaosDefaultRounds keeps make test short.
	chaosDefaultRounds = 5
	// chaosPauseJob is a job in git that no client pauses; the clients
	// pause and resume hold-<round>, a job of each round, so that the
	// history splits into short registers.
	chaosPauseJob = "web"
	// chaosGateJob waits for an approval in every round.
	chaosGateJob = "gate"
	// chaosAutoJob deploys without one in every round.
	chaosAutoJob = "app"
	// chaosWindow prefixes the name of each round's window, which the
	// clients put and delete.
	chaosWindow = "chaos"
	// checkTimeout bounds the linearizability check.
	checkTimeout = 2 * time.Minute
)

// TestPartition_Chaos runs rounds of random faults (isolations, cuts,
// one-way links, delays, kills of any server or of the leader) while
// clients set and clear a job's pause, put and delete a sync window and
// approve the round's deployment through random servers. Every client
// operation is recorded with its call and return times and its outcome
// (indeterminate for a 502, a timeout or a lost connection), and the
// history is checked for linearizability against a model of each
// register. After each heal the servers must converge; at the end no
// acknowledged write is lost and no job was registered twice for one
// deployment. The seed is printed; NOPS_CHAOS_SEED replays it.
func TestPartition_Chaos(t *testing.T) {
	rounds := chaosRounds(t)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(chaosSeedEnv); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("%s=%q: not an unsigned integer: %v", chaosSeedEnv, v, err)
		}
		seed = s
	}
	t.Logf("chaos: seed %d (%s=%d replays it), %d rounds", seed, chaosSeedEnv, seed, rounds)
	rng := rand.New(rand.NewPCG(seed, seed>>1|1))

	f := newPartitionFixture(t, chaosFiles(0))
	h := newHistory()
	repo := repoName(t, f)
	var converge []time.Duration
	var gates []string
	for round := 1; round <= rounds; round++ {
		gate := f.startRound(t, repo, round)
		gates = append(gates, gate)
		stop := h.runClients(f, round, gate, rng.Uint64())
		fault := f.injectFault(t, rng)
		time.Sleep(time.Duration(2000+rng.IntN(3000)) * time.Millisecond)
		healed := time.Now()
		fault.heal()
		f.waitConverged(t)
		took := time.Since(healed)
		stop()
		converge = append(converge, took)
		t.Logf("chaos: round %d: %s; converged %s after the heal", round, fault.name, took.Round(time.Millisecond))
	}
	h.finalReads(f, rounds, gates)

	lost := f.lostWrites(t, h, gates)
	double := f.waitDeploymentsAndCountDoubles(t)
	ok, unknown, failed := h.counts()
	t.Logf("chaos: rounds %d, operations %d ok, %d indeterminate, %d failed (not applied)", rounds, ok, unknown, failed)
	t.Logf("chaos: acknowledged writes lost %d, double registers %d", lost, double)
	t.Logf("chaos: time to converge after heal (restart included) p50 %s, max %s", testutil.Median(converge).Round(time.Millisecond), testutil.Percentile(converge, 1).Round(time.Millisecond))
	if lost != 0 {
		t.Errorf("%d acknowledged writes lost", lost)
	}
	if double != 0 {
		t.Errorf("%d double registers", double)
	}
	res, info := porcupine.CheckOperationsVerbose(registerModel, h.operations(), checkTimeout)
	switch res {
	case porcupine.Illegal:
		// Kept after the test, which removes its own temporary directory.
		if f, err := os.CreateTemp("", "nops-chaos-*.html"); err == nil {
			if err := porcupine.Visualize(registerModel, info, f); err == nil {
				t.Logf("chaos: the history's visualization is in %s", f.Name())
			}
			_ = f.Close()
		}
		h.logIllegal(t)
		t.Errorf("the history of %d operations is not linearizable", len(h.operations()))
	case porcupine.Unknown:
		t.Errorf("the linearizability check did not finish within %s", checkTimeout)
	default:
		t.Logf("chaos: the history of %d operations is linearizable", len(h.operations()))
	}
}

func chaosRounds(t *testing.T) int {
	v := os.Getenv(chaosRoundsEnv)
	if v == "" {
		return chaosDefaultRounds
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		t.Fatalf("%s=%q: want a positive number of rounds", chaosRoundsEnv, v)
	}
	return n
}

// chaosFiles are the job files of a round: the gate and auto jobs change
// in every round, the paused job never.
func chaosFiles(round int) map[string]string {
	env := testutil.WithEnv("ROUND", strconv.Itoa(round))
	return map[string]string{
		"jobs/" + chaosPauseJob + ".nomad.hcl": managedJob(chaosPauseJob, structs.PolicyNone),
		"jobs/" + chaosGateJob + ".nomad.hcl":  managedJob(chaosGateJob, structs.PolicyApproval, env),
		"jobs/" + chaosAutoJob + ".nomad.hcl":  managedJob(chaosAutoJob, structs.PolicyAuto, env),
	}
}

// repoName waits until the leader lists the one repository, and returns
// its name.
func repoName(t *testing.T, f *partitionFixture) string {
	t.Helper()
	var repos []structs.RepoStatus
	testutil.WaitForResult(t, deployTimeout, func() (bool, error) {
		if _, _, err := f.cluster.Server(f.cluster.Leader()).Call(http.MethodGet, "/v1/repos", nil, &repos); err != nil {
			return false, err
		}
		if len(repos) != 1 {
			return false, fmt.Errorf("%d repositories listed, want 1", len(repos))
		}
		return true, nil
	})
	return repos[0].Name
}

// startRound commits the round's jobs, has the cluster fetch them, and
// returns the gate job's deployment that waits for approval.
func (f *partitionFixture) startRound(t *testing.T, repo string, round int) string {
	t.Helper()
	for path, content := range chaosFiles(round) {
		f.repo.WriteFile(path, content)
	}
	commit := f.repo.Commit(fmt.Sprintf("round %d", round))
	leader := f.cluster.Server(f.cluster.Leader())
	leader.Do(http.MethodPost, "/v1/repo/"+repo+"/refresh", nil, nil, http.StatusOK)
	d := leader.WaitForDeployment(namespace, chaosGateJob, deployTimeout, func(d *structs.Deployment) error {
		if d.Commit != commit {
			return fmt.Errorf("commit %s, want %s", d.Commit, commit)
		}
		return nopstest.InState(structs.StatePendingApproval)(d)
	})
	return d.ID
}

// chaosFault is one fault of a round and how to end it.
type chaosFault struct {
	name string
	heal func()
}

// injectFault picks and applies a random fault.
func (f *partitionFixture) injectFault(t *testing.T, rng *rand.Rand) chaosFault {
	t.Helper()
	c := f.cluster
	n := c.Len()
	leader := c.Leader()
	a, b := rng.IntN(n), rng.IntN(n-1)
	if b >= a {
		b++
	}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	heal := func() { f.net.Heal() }
	switch kind := rng.IntN(7); kind {
	case 0:
		must(f.net.Isolate(leader))
		return chaosFault{"isolate the leader " + c.Server(leader).Name, heal}
	case 1:
		must(f.net.Isolate(a))
		return chaosFault{"isolate " + c.Server(a).Name, heal}
	case 2:
		must(f.net.Cut(a, b))
		return chaosFault{fmt.Sprintf("cut %s from %s", c.Server(a).Name, c.Server(b).Name), heal}
	case 3:
		must(f.net.Block(a, b))
		return chaosFault{fmt.Sprintf("one-way: %s -> %s blocked", c.Server(a).Name, c.Server(b).Name), heal}
	case 4:
		d := time.Duration(100+rng.IntN(900)) * time.Millisecond
		for j := range n {
			if j != a {
				must(f.net.Delay(a, j, d))
				must(f.net.Delay(j, a, d))
			}
		}
		return chaosFault{fmt.Sprintf("delay %s by %s", c.Server(a).Name, d), heal}
	case 5:
		c.Kill(leader)
		return chaosFault{"kill the leader " + c.Server(leader).Name, func() { c.Restart(leader) }}
	default:
		c.Kill(a)
		return chaosFault{"kill " + c.Server(a).Name, func() { c.Restart(a) }}
	}
}

// lostWrites counts the acknowledged writes that the converged cluster
// does not hold: pauses and window puts missing from the audit log of a
// server, approvals missing from their deployment.
func (f *partitionFixture) lostWrites(t *testing.T, h *history, gates []string) int {
	t.Helper()
	lost := 0
	for _, i := range f.cluster.Running() {
		p := f.cluster.Server(i)
		var events []*structs.Event
		if _, _, err := p.Call(http.MethodGet, "/v1/events", nil, &events); err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for _, e := range events {
			seen[string(e.Kind)+"/"+e.Message] = true
		}
		for _, op := range h.acknowledged() {
			var key string
			switch op.Op {
			case opPause:
				key = string(structs.EventKindPause) + "/" + op.Value
			case opPutWindow:
				key = fmt.Sprintf("%s/deny window %q replaced for %s", structs.EventKindWindow, windowSchedule, op.Value)
				if !seen[key] {
					key = fmt.Sprintf("%s/deny window %q created for %s", structs.EventKindWindow, windowSchedule, op.Value)
				}
			case opApprove:
				d, err := p.Deployment(strings.TrimPrefix(op.Key, "approve/"))
				if err != nil {
					t.Fatal(err)
				}
				if !hasApproval(d) {
					t.Errorf("%s: the acknowledged approval of %s is missing", p.Name, d.ID)
					lost++
				}
				continue
			default:
				continue
			}
			if !seen[key] {
				t.Errorf("%s: the acknowledged %s %q is missing from the audit log", p.Name, op.Op, op.Value)
				lost++
			}
		}
	}
	return lost
}

func hasApproval(d *structs.Deployment) bool {
	for _, dec := range d.Decisions {
		if dec.Kind == structs.DecisionApprove {
			return true
		}
	}
	return false
}

// waitDeploymentsAndCountDoubles waits until no deployment of the gate and
// auto jobs is active, then counts the registers beyond one per deployment
// that registered: Nomad's register evaluations of each job against the
// deployments that recorded one.
func (f *partitionFixture) waitDeploymentsAndCountDoubles(t *testing.T) int {
	t.Helper()
	leader := f.cluster.Server(f.cluster.Leader())
	// The last gate deployment waits for an approval that may have been
	// refused: reject it so that nothing is left active.
	double := 0
	for _, id := range []string{chaosGateJob, chaosAutoJob} {
		var list []*structs.Deployment
		testutil.WaitForResult(t, deployTimeout, func() (bool, error) {
			var err error
			if list, err = leader.Deployments(namespace, id); err != nil {
				return false, err
			}
			for _, d := range list {
				if d.State == structs.StatePendingApproval {
					if _, _, err := leader.Call(http.MethodPost, "/v1/deployment/"+d.ID+"/reject", map[string]string{"reason": "end of the chaos"}, nil); err != nil {
						return false, err
					}
				}
				if !d.State.Terminal() {
					return false, fmt.Errorf("deployment %s of %s is %s", d.ID, id, d.State)
				}
			}
			return true, nil
		})
		registered := 0
		for _, d := range list {
			if d.NomadEvalID != "" {
				registered++
			}
		}
		_, evals := f.registersOf(t, id)
		regs := len(f.registers(id))
		t.Logf("chaos: job %s: %d deployments, %d registered; Nomad saw %d register evaluations, the proxies %d successful registers",
			id, len(list), registered, evals, regs)
		double += max(evals-registered, 0) + max(regs-registered, 0)
	}
	return double
}

// The client operations on the registers.
const (
	opRead      = "read"
	opPause     = "pause"
	opResume    = "resume"
	opPutWindow = "put-window"
	opDelWindow = "delete-window"
	opApprove   = "approve"
)

// Outcomes of an operation. A failed operation (503: no leader, not
// applied; a refused connection) is left out of the history.
const (
	outOK       = "ok"
	outNotFound = "not-found"
	outConflict = "conflict"
	outUnknown  = "unknown"
)

// windowSchedule is the schedule of the clients' window: a deny window
// that opens once a year and matches no job, so it holds nothing.
const windowSchedule = "0 0 1 1 *"

type regInput struct {
	Key   string // pause/<job>, window/<name>, approve/<deployment>
	Op    string
	Value string
}

type regOutput struct {
	Outcome string
	Value   string // what a read returned
}

// registerModel is one register per key: a job's pause (its reason, or
// empty when not paused), a window (its duration, or empty when absent),
// a deployment's approval ("approved", or empty). An indeterminate write
// may take effect at any point after its call, or never: its return time
// is the end of the history, so it can be placed last, where it changes
// nothing anyone saw.
var registerModel = porcupine.Model{
	Partition: func(ops []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range ops {
			k := op.Input.(regInput).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		out := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		s, in, out := state.(string), input.(regInput), output.(regOutput)
		return stepRegister(s, in, out)
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(regInput), output.(regOutput)
		return fmt.Sprintf("%s %s(%s) -> %s %s", in.Key, in.Op, in.Value, out.Outcome, out.Value)
	},
}

func stepRegister(s string, in regInput, out regOutput) (bool, string) {
	unknown := out.Outcome == outUnknown
	switch in.Op {
	case opRead:
		return out.Value == s, s
	case opPause, opPutWindow:
		return unknown || out.Outcome == outOK, in.Value
	case opResume, opDelWindow:
		switch {
		case unknown:
			return true, ""
		case out.Outcome == outOK:
			return s != "", ""
		default:
			return out.Outcome == outNotFound && s == "", s
		}
	case opApprove:
		switch {
		case unknown:
			return true, "approved"
		case out.Outcome == outOK:
			return s == "", "approved"
		default:
			return out.Outcome == outConflict && s == "approved", s
		}
	}
	return false, s
}

// history records the operations of every client.
type history struct {
	start time.Time

	mu      sync.Mutex
	ops     []porcupine.Operation
	failed  int
	clients int
}

func newHistory() *history { return &history{start: time.Now()} }

func (h *history) now() int64 { return int64(time.Since(h.start)) }

func (h *history) record(client int, in regInput, call int64, out regOutput) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ret := h.now()
	if out.Outcome == outUnknown {
		ret = 1 << 62 // the end of the history
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Input: in, Call: call, Output: out, Return: ret})
}

func (h *history) fail() {
	h.mu.Lock()
	h.failed++
	h.mu.Unlock()
}

func (h *history) operations() []porcupine.Operation {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.ops)
}

func (h *history) acknowledged() []regInput {
	var out []regInput
	for _, op := range h.operations() {
		if op.Output.(regOutput).Outcome == outOK && op.Input.(regInput).Op != opRead {
			out = append(out, op.Input.(regInput))
		}
	}
	return out
}

func (h *history) counts() (ok, unknown, failed int) {
	for _, op := range h.operations() {
		if op.Output.(regOutput).Outcome == outUnknown {
			unknown++
		} else {
			ok++
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return ok, unknown, h.failed
}

// logIllegal logs the operations of each register whose history alone
// is not linearizable, in the order of their calls.
func (h *history) logIllegal(t *testing.T) {
	for _, part := range registerModel.Partition(h.operations()) {
		if porcupine.CheckOperations(registerModel, part) {
			continue
		}
		slices.SortFunc(part, func(a, b porcupine.Operation) int { return int(a.Call - b.Call) })
		t.Logf("chaos: register %s is not linearizable:", part[0].Input.(regInput).Key)
		for _, op := range part {
			ret := "never"
			if op.Return < 1<<62 {
				ret = time.Duration(op.Return).String()
			}
			t.Logf("  client %d [%s, %s] %s", op.ClientId, time.Duration(op.Call), ret, registerModel.DescribeOperation(op.Input, op.Output))
		}
	}
}

// runClients starts one client per register, each sending random
// operations to random running servers, and returns a function that stops
// them and waits for them.
func (h *history) runClients(f *partitionFixture, round int, gate string, seed uint64) func() {
	done := make(chan struct{})
	var wg sync.WaitGroup
	h.mu.Lock()
	base := h.clients
	h.clients += 3
	h.mu.Unlock()
	for k, gen := range []func(*rand.Rand, int) regInput{pauseOp(round), windowOp(round), approveOp(gate)} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(k)))
			for n := 0; ; n++ {
				select {
				case <-done:
					return
				default:
				}
				running := f.cluster.Running()
				if len(running) == 0 {
					time.Sleep(100 * time.Millisecond)
					continue
				}
				p := f.cluster.Server(running[rng.IntN(len(running))])
				h.do(p, base+k, gen(rng, n))
				time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond)
			}
		}()
	}
	return func() { close(done); wg.Wait() }
}

func pauseKey(round int) string  { return fmt.Sprintf("pause/hold-%d", round) }
func windowKey(round int) string { return fmt.Sprintf("window/%s-%d", chaosWindow, round) }

func pauseOp(round int) func(*rand.Rand, int) regInput {
	return func(rng *rand.Rand, n int) regInput { return pauseOpOf(pauseKey(round), rng, n) }
}

func windowOp(round int) func(*rand.Rand, int) regInput {
	return func(rng *rand.Rand, _ int) regInput { return windowOpOf(windowKey(round), rng) }
}

func pauseOpOf(key string, rng *rand.Rand, n int) regInput {
	switch rng.IntN(3) {
	case 0:
		return regInput{Key: key, Op: opPause, Value: fmt.Sprintf("chaos %d.%d", rng.Uint32(), n)}
	case 1:
		return regInput{Key: key, Op: opResume}
	}
	return regInput{Key: key, Op: opRead}
}

func windowOpOf(key string, rng *rand.Rand) regInput {
	switch rng.IntN(3) {
	case 0:
		return regInput{Key: key, Op: opPutWindow, Value: fmt.Sprintf("%dm", 1+rng.IntN(100000))}
	case 1:
		return regInput{Key: key, Op: opDelWindow}
	}
	return regInput{Key: key, Op: opRead}
}

func approveOp(gate string) func(*rand.Rand, int) regInput {
	return func(rng *rand.Rand, _ int) regInput {
		if rng.IntN(3) == 0 {
			return regInput{Key: "approve/" + gate, Op: opApprove}
		}
		return regInput{Key: "approve/" + gate, Op: opRead}
	}
}

// do sends one operation to p and records it.
func (h *history) do(p *nopstest.Process, client int, in regInput) {
	call := h.now()
	method, path, body := request(in)
	var raw json.RawMessage
	code, _, err := p.Call(method, path, body, &raw)
	out, recorded := outcome(in, code, err, raw)
	if !recorded {
		h.fail()
		return
	}
	h.record(client, in, call, out)
}

func request(in regInput) (method, path string, body any) {
	_, name, _ := strings.Cut(in.Key, "/")
	switch in.Op {
	case opPause:
		return http.MethodPost, "/v1/job/" + namespace + "/" + name + "/pause", map[string]string{"reason": in.Value}
	case opResume:
		return http.MethodPost, "/v1/job/" + namespace + "/" + name + "/resume", map[string]string{"reason": "chaos"}
	case opPutWindow:
		return http.MethodPut, "/v1/window/" + name, structs.WindowSpec{
			Kind: string(structs.WindowDeny), Schedule: windowSchedule, Duration: in.Value, Jobs: []string{"no-such-job-*"},
		}
	case opDelWindow:
		return http.MethodDelete, "/v1/window/" + name, nil
	case opApprove:
		return http.MethodPost, "/v1/deployment/" + name + "/approve", map[string]string{"comment": "chaos"}
	}
	switch {
	case strings.HasPrefix(in.Key, "pause/"):
		return http.MethodGet, "/v1/pauses?consistent", nil
	case strings.HasPrefix(in.Key, "window/"):
		return http.MethodGet, "/v1/window/" + name + "?consistent", nil
	}
	return http.MethodGet, "/v1/deployment/" + name + "?consistent", nil
}

// outcome classifies an answer. It reports false for an operation that
// surely did not happen (a failed read; a write refused with 503 or never
// sent), which the history leaves out.
func outcome(in regInput, code int, err error, raw json.RawMessage) (regOutput, bool) {
	if in.Op == opRead {
		if code == http.StatusNotFound && strings.HasPrefix(in.Key, "window/") {
			return regOutput{Outcome: outOK}, true
		}
		if code != http.StatusOK {
			return regOutput{}, false
		}
		v, perr := readValue(in, raw)
		if perr != nil {
			return regOutput{}, false
		}
		return regOutput{Outcome: outOK, Value: v}, true
	}
	switch {
	case code == http.StatusOK:
		return regOutput{Outcome: outOK}, true
	case code == http.StatusNotFound && (in.Op == opResume || in.Op == opDelWindow):
		return regOutput{Outcome: outNotFound}, true
	case code == http.StatusConflict && in.Op == opApprove:
		return regOutput{Outcome: outConflict}, true
	case code == http.StatusServiceUnavailable, code == 0 && errors.Is(err, syscall.ECONNREFUSED):
		return regOutput{}, false
	}
	return regOutput{Outcome: outUnknown}, true
}

// readValue extracts the register's value from a read's answer.
func readValue(in regInput, raw json.RawMessage) (string, error) {
	_, name, _ := strings.Cut(in.Key, "/")
	switch {
	case strings.HasPrefix(in.Key, "pause/"):
		var pauses []structs.Pause
		if err := json.Unmarshal(raw, &pauses); err != nil {
			return "", err
		}
		for _, p := range pauses {
			if !p.Global && p.JobID == name {
				return p.Reason, nil
			}
		}
		return "", nil
	case strings.HasPrefix(in.Key, "window/"):
		var w structs.SyncWindow
		if err := json.Unmarshal(raw, &w); err != nil {
			return "", err
		}
		return w.Duration, nil
	}
	var d structs.Deployment
	if err := json.Unmarshal(raw, &d); err != nil {
		return "", err
	}
	if hasApproval(&d) {
		return "approved", nil
	}
	return "", nil
}

// finalReads reads every register once more through the converged
// cluster, so that a lost acknowledged write shows in the history.
func (h *history) finalReads(f *partitionFixture, rounds int, gates []string) {
	p := f.cluster.Server(f.cluster.Leader())
	var keys []string
	for r := 1; r <= rounds; r++ {
		keys = append(keys, pauseKey(r), windowKey(r), "approve/"+gates[r-1])
	}
	for _, k := range keys {
		h.do(p, 0, regInput{Key: k, Op: opRead})
	}
}

// TestRegisterModel checks the model the chaos history is checked with on
// small histories: a lost acknowledged write, a read of a value never
// written and a second acknowledged approval are caught; an indeterminate
// write may or may not have happened.
func TestRegisterModel(t *testing.T) {
	const never = 1 << 62
	op := func(call, ret int64, key, kind, value, outcome, read string) porcupine.Operation {
		return porcupine.Operation{Input: regInput{Key: key, Op: kind, Value: value}, Call: call, Return: ret,
			Output: regOutput{Outcome: outcome, Value: read}}
	}
	for _, tc := range []struct {
		name string
		ops  []porcupine.Operation
		want bool
	}{
		{"acknowledged pause then read", []porcupine.Operation{
			op(0, 1, "pause/a", opPause, "x", outOK, ""),
			op(2, 3, "pause/a", opRead, "", outOK, "x"),
		}, true},
		{"acknowledged pause lost", []porcupine.Operation{
			op(0, 1, "pause/a", opPause, "x", outOK, ""),
			op(2, 3, "pause/a", opRead, "", outOK, ""),
		}, false},
		{"read of a value never written", []porcupine.Operation{
			op(0, 1, "window/w", opRead, "", outOK, "5m"),
		}, false},
		{"indeterminate put seen", []porcupine.Operation{
			op(0, never, "window/w", opPutWindow, "5m", outUnknown, ""),
			op(2, 3, "window/w", opRead, "", outOK, "5m"),
		}, true},
		{"indeterminate put never seen", []porcupine.Operation{
			op(0, never, "window/w", opPutWindow, "5m", outUnknown, ""),
			op(2, 3, "window/w", opRead, "", outOK, ""),
		}, true},
		{"resume of a job not paused is not found", []porcupine.Operation{
			op(0, 1, "pause/a", opResume, "", outNotFound, ""),
		}, true},
		{"resume answered not found after an acknowledged pause", []porcupine.Operation{
			op(0, 1, "pause/a", opPause, "x", outOK, ""),
			op(2, 3, "pause/a", opResume, "", outNotFound, ""),
		}, false},
		{"two acknowledged approvals", []porcupine.Operation{
			op(0, 1, "approve/d", opApprove, "", outOK, ""),
			op(2, 3, "approve/d", opApprove, "", outOK, ""),
		}, false},
		{"concurrent approvals, one refused", []porcupine.Operation{
			op(0, 3, "approve/d", opApprove, "", outConflict, ""),
			op(1, 2, "approve/d", opApprove, "", outOK, ""),
		}, true},
		{"registers are independent", []porcupine.Operation{
			op(0, 1, "pause/a", opPause, "x", outOK, ""),
			op(2, 3, "pause/b", opRead, "", outOK, ""),
		}, true},
	} {
		if got := porcupine.CheckOperations(registerModel, tc.ops); got != tc.want {
			t.Errorf("%s: linearizable %t, want %t", tc.name, got, tc.want)
		}
	}
}
