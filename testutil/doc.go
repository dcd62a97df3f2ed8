// Package testutil runs the real parts that Nops tests depend on: Nomad and
// Consul dev agents started from the pinned binaries in bin/, child
// processes of other binaries (Process, which nopstest uses for `nops
// serve`), git repositories created with the git CLI (optionally served
// over smart HTTP), free TCP ports and polling helpers, HCL job specs for
// Nomad's mock_driver, and a SyncBuffer for output read while it is
// written.
//
// Guarantees:
//
//   - Every agent a test starts is private to that test: its own free ports,
//     its own data, alloc and plugin directories under t.TempDir(), and its
//     own log file. Agents from tests running in parallel, in one package or
//     in many, never share state.
//   - Every agent is stopped (SIGINT, then SIGKILL of its process group) in
//     t.Cleanup, and when the test binary dies the kernel kills it (Linux).
//     When a test fails, the tail of the agent's log is printed. A Process
//     stops the same way when its owner calls Stop, and the kernel kills it
//     too when the test binary dies.
//   - A helper returns only once the thing it started is usable: a Nomad
//     agent has an elected leader and a ready, eligible client node whose
//     mock_driver is healthy; a Consul agent has a leader.
//   - Waiting is always polling with a deadline (WaitForResult and friends),
//     never a fixed sleep; a timeout fails the test with the last error seen.
//   - A missing binary skips the test with a hint (`make nomad`), except when
//     NOPS_REQUIRE_NOMAD=1 (resp. NOPS_REQUIRE_CONSUL=1) or CI=true, where it
//     fails the test, so a broken install step cannot hide behind a green run.
package testutil
