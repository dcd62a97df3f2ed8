package structs

import (
	"bytes"
	"fmt"

	"github.com/hashicorp/go-msgpack/v2/codec"
)

// MessageType is the first byte of every Raft log entry and names the request
// that follows it. The list is append-only: new types go at the end.
type MessageType uint8

const (
	DeploymentCreateRequestType     MessageType = 0
	DeploymentTransitionRequestType MessageType = 1
	DeploymentUpdateRequestType     MessageType = 2
	DeploymentDecisionRequestType   MessageType = 3
	PauseRequestType                MessageType = 4
	ResumeRequestType               MessageType = 5
	WindowUpsertRequestType         MessageType = 6
	WindowDeleteRequestType         MessageType = 7
	WindowLiftRequestType           MessageType = 8
	JobStatusUpsertRequestType      MessageType = 9
	JobStatusDeleteRequestType      MessageType = 10
	RepoStatusUpsertRequestType     MessageType = 11
	DetectionCycleRequestType       MessageType = 12
	RetryRequestType                MessageType = 13
	EventAppendRequestType          MessageType = 14
	ACLPolicyUpsertRequestType      MessageType = 15
	ACLPolicyDeleteRequestType      MessageType = 16
	ACLRoleUpsertRequestType        MessageType = 17
	ACLRoleDeleteRequestType        MessageType = 18
	ACLTokenUpsertRequestType       MessageType = 19
	ACLTokenDeleteRequestType       MessageType = 20
	ACLTokenBootstrapRequestType    MessageType = 21
	ACLAuthMethodUpsertRequestType  MessageType = 22
	ACLAuthMethodDeleteRequestType  MessageType = 23
	ACLBindingRuleUpsertRequestType MessageType = 24
	ACLBindingRuleDeleteRequestType MessageType = 25
	// NotificationResultRequestType records delivery attempts of the
	// notification outbox and their outcomes.
	NotificationResultRequestType MessageType = 26
	// NotificationPruneRequestType removes finished notifications older
	// than a cut-off time.
	NotificationPruneRequestType MessageType = 27
	// NotifyMarkRequestType records an observation of the leader (a window
	// opened or closed, the leader changed); it notifies when it differs
	// from the last one recorded.
	NotifyMarkRequestType MessageType = 28
	// AutopilotSetConfigRequestType stores the operator's autopilot
	// configuration (check-and-set).
	AutopilotSetConfigRequestType MessageType = 29
	// GCRequestType runs one pass of retention: it drops the job specs of
	// old finished deployments and deletes old deployments and events, by
	// the cut-offs the leader proposes.
	GCRequestType MessageType = 30
	// BatchRequestType holds several requests the leader proposed
	// together (see batch.go): one log entry, applied at one index, each
	// request in its order, with its own answer and its own atomicity.
	BatchRequestType MessageType = 31
	// WebhookDeliveryRequestType records a push webhook delivery that
	// passed its signature check, by its provider's delivery ID, so that a
	// replay of it changes nothing (on any server, after a failover too).
	WebhookDeliveryRequestType MessageType = 32
	// DeploymentSkipRequirementsRequestType lets a deployment waiting in
	// detected for its cluster's promotion order (SPEC section 16) start
	// without it: an operator's audited decision.
	DeploymentSkipRequirementsRequestType MessageType = 33
	// New types go here, at the end.
)

// IgnoreUnknownTypeFlag is set on a MessageType that an older server may skip
// when it does not know it, rather than stop applying the log.
const IgnoreUnknownTypeFlag MessageType = 128

var messageTypeNames = map[MessageType]string{
	DeploymentCreateRequestType:     "DeploymentCreate",
	DeploymentTransitionRequestType: "DeploymentTransition",
	DeploymentUpdateRequestType:     "DeploymentUpdate",
	DeploymentDecisionRequestType:   "DeploymentDecision",
	PauseRequestType:                "Pause",
	ResumeRequestType:               "Resume",
	WindowUpsertRequestType:         "WindowUpsert",
	WindowDeleteRequestType:         "WindowDelete",
	WindowLiftRequestType:           "WindowLift",
	JobStatusUpsertRequestType:      "JobStatusUpsert",
	JobStatusDeleteRequestType:      "JobStatusDelete",
	RepoStatusUpsertRequestType:     "RepoStatusUpsert",
	DetectionCycleRequestType:       "DetectionCycle",
	RetryRequestType:                "Retry",
	EventAppendRequestType:          "EventAppend",
	ACLPolicyUpsertRequestType:      "ACLPolicyUpsert",
	ACLPolicyDeleteRequestType:      "ACLPolicyDelete",
	ACLRoleUpsertRequestType:        "ACLRoleUpsert",
	ACLRoleDeleteRequestType:        "ACLRoleDelete",
	ACLTokenUpsertRequestType:       "ACLTokenUpsert",
	ACLTokenDeleteRequestType:       "ACLTokenDelete",
	ACLTokenBootstrapRequestType:    "ACLTokenBootstrap",
	ACLAuthMethodUpsertRequestType:  "ACLAuthMethodUpsert",
	ACLAuthMethodDeleteRequestType:  "ACLAuthMethodDelete",
	ACLBindingRuleUpsertRequestType: "ACLBindingRuleUpsert",
	ACLBindingRuleDeleteRequestType: "ACLBindingRuleDelete",
	NotificationResultRequestType:   "NotificationResult",
	NotificationPruneRequestType:    "NotificationPrune",
	NotifyMarkRequestType:           "NotifyMark",
	AutopilotSetConfigRequestType:   "AutopilotSetConfig",
	GCRequestType:                   "GC",
	BatchRequestType:                "Batch",
	WebhookDeliveryRequestType:      "WebhookDelivery",

	DeploymentSkipRequirementsRequestType: "DeploymentSkipRequirements",
}

func (t MessageType) String() string {
	if n, ok := messageTypeNames[t&^IgnoreUnknownTypeFlag]; ok {
		return n
	}
	return fmt.Sprintf("MessageType(%d)", uint8(t))
}

// MaxDecodeInitLen bounds what a decoder allocates for a collection before
// it has read its elements: a length claimed by the input is only trusted
// as far as the input goes, so a tiny entry cannot claim a huge slice.
const MaxDecodeInitLen = 4096

// NewMsgpackHandle returns the msgpack settings of the log and of
// snapshots: fields are named by their json tag, times are written in their
// binary form (a zero time stays a zero time, not nil), and a collection is
// allocated as it is read, never from a claimed length alone. A handle is
// read-only once in use; each caller builds its own.
func NewMsgpackHandle() *codec.MsgpackHandle {
	h := &codec.MsgpackHandle{WriteExt: true}
	h.TypeInfos = codec.NewTypeInfos([]string{"codec", "json"})
	h.TimeNotBuiltin = true
	h.RawToString = true
	h.MaxInitLen = MaxDecodeInitLen
	// The deepest real value (a request holding a deployment holding a
	// job spec) nests a few dozen levels; a deeper input is an attack on
	// the decoder's stack.
	h.MaxDepth = 64
	return h
}

// msgpackHandle is configured once, here, and never changed: it holds no
// mutable state of the program.
var msgpackHandle = NewMsgpackHandle()

// Encode writes a log entry: the type byte followed by the msgpack of msg.
func Encode(t MessageType, msg any) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte(uint8(t))
	if err := codec.NewEncoder(&buf, msgpackHandle).Encode(msg); err != nil {
		return nil, fmt.Errorf("encode %s: %w", t, err)
	}
	// Raft keeps the newest entries in memory: an exact copy, not a
	// buffer grown to up to twice the entry (10,000 job statuses are
	// megabytes).
	return bytes.Clone(buf.Bytes()), nil
}

// Decode reads the msgpack body of a log entry or snapshot record into out.
// Bad input is an error, never a panic, and data after the value is an
// error too.
func Decode(buf []byte, out any) error {
	dec := codec.NewDecoderBytes(buf, msgpackHandle)
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("decode %T: %w", out, err)
	}
	if n := dec.NumBytesRead(); n != len(buf) {
		return fmt.Errorf("decode %T: %d trailing bytes", out, len(buf)-n)
	}
	return nil
}
