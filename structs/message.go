package structs

import (
	"bytes"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
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
	AutopilotSetConfigRequestType   MessageType = 50
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
	AutopilotSetConfigRequestType:   "AutopilotSetConfig",
}

// MessageTypes lists every known message type, in order.
func MessageTypes() []MessageType {
	out := make([]MessageType, 0, len(messageTypeNames))
	for t := MessageType(0); t < IgnoreUnknownTypeFlag; t++ {
		if _, ok := messageTypeNames[t]; ok {
			out = append(out, t)
		}
	}
	return out
}

func (t MessageType) String() string {
	if n, ok := messageTypeNames[t&^IgnoreUnknownTypeFlag]; ok {
		return n
	}
	return fmt.Sprintf("MessageType(%d)", uint8(t))
}

// Encode writes a log entry: the type byte followed by the msgpack of msg.
func Encode(t MessageType, msg any) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte(uint8(t))
	enc := msgpack.NewEncoder(&buf)
	enc.SetCustomStructTag("json")
	enc.UseCompactInts(true)
	if err := enc.Encode(msg); err != nil {
		return nil, fmt.Errorf("encode %s: %w", t, err)
	}
	return buf.Bytes(), nil
}

// Decode reads the msgpack body of a log entry or snapshot record into out.
func Decode(buf []byte, out any) error {
	dec := msgpack.NewDecoder(bytes.NewReader(buf))
	dec.SetCustomStructTag("json")
	if err := dec.Decode(out); err != nil {
		return fmt.Errorf("decode %T: %w", out, err)
	}
	return nil
}
