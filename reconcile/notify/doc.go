// Package notify delivers the notifications of the replicated outbox
// (SPEC section 13): the leader's delivery loop and the adapters that send
// to a generic webhook, to Slack, by email over SMTP, and as a dispatch of
// a Nomad parameterized job. The agent builds the targets from the notify
// blocks of its configuration.
//
// Every notification is written by the FSM in the same Raft entry as the
// change that causes it (see fsm/outbox.go), so a committed change always
// has its notification, on every server. Only the leader delivers: the loop
// starts with leadership and stops with it. For each pending notification
// it picks the configured targets whose filters match, sends, and records
// every attempt and its outcome through Raft. A failed attempt is retried
// with exponential backoff and jitter until the target's give-up age, after
// which the delivery is marked dead and stays visible in the API. Delivered
// and dead notifications are pruned through Raft after the retention.
//
// Guarantees:
//   - None lost: a notification is committed with its change, and stays
//     pending until a leader records its delivery (or gives up).
//   - At-least-once delivery, with one idempotency key per (notification,
//     target) that every attempt on every leader carries. A leader that dies
//     after a receiver accepted but before the delivery was recorded causes
//     one more attempt with the same key: receivers that honour the key see
//     the effect exactly once.
//   - Order per job and target: a notification is not sent to a target
//     while an earlier one about the same job is still pending there.
package notify
