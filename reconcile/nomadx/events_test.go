package nomadx

import (
	"testing"

	"github.com/hashicorp/nomad/api"
)

// TestJobChange_Payloads: the fields Nops reads from an event are taken
// from what Nomad sends, and a payload of unexpected shape gives an empty
// change rather than a panic.
func TestJobChange_Payloads(t *testing.T) {
	for _, c := range []struct {
		name string
		ev   api.Event
		want JobChange
		ok   bool
	}{
		{"register", api.Event{Topic: api.TopicJob, Type: "JobRegistered", Key: "web",
			Payload: map[string]any{"Job": map[string]any{"ID": "web", "Namespace": "prod", "JobModifyIndex": float64(42)}}},
			JobChange{Type: "JobRegistered", Namespace: "prod", JobID: "web", JobModifyIndex: 42}, true},
		{"no payload", api.Event{Topic: api.TopicJob, Type: "JobRegistered", Key: "web"},
			JobChange{Type: "JobRegistered", JobID: "web"}, true},
		{"garbage", api.Event{Topic: api.TopicJob, Type: "JobRegistered", Key: "web",
			Payload: map[string]any{"Job": []any{1, 2}, "Deleted": "yes"}},
			JobChange{Type: "JobRegistered", JobID: "web"}, true},
		{"wrong types", api.Event{Topic: api.TopicJob, Type: "X", Key: "web",
			Payload: map[string]any{"Job": map[string]any{"ID": 7, "Namespace": false, "JobModifyIndex": "12"}}},
			JobChange{Type: "X", JobID: "web"}, true},
		{"negative index", api.Event{Topic: api.TopicJob, Type: "X", Key: "web",
			Payload: map[string]any{"Job": map[string]any{"JobModifyIndex": float64(-3)}}},
			JobChange{Type: "X", JobID: "web"}, true},
	} {
		if got := jobChange(&c.ev); got != c.want {
			t.Errorf("%s: jobChange = %+v, want %+v", c.name, got, c.want)
		}
	}

	purge := api.Event{Topic: api.TopicEvaluation, Payload: map[string]any{"Evaluation": map[string]any{
		"TriggeredBy": "job-deregister", "JobID": "web", "Namespace": "default"}}}
	if got, ok := purgeChange(&purge); !ok || got.JobID != "web" || got.Namespace != "default" || !got.Deleted {
		t.Errorf("purge: %+v %v", got, ok)
	}
	for _, ev := range []api.Event{
		{Topic: api.TopicEvaluation, Payload: map[string]any{"Evaluation": map[string]any{"TriggeredBy": "job-register", "JobID": "web"}}},
		{Topic: api.TopicEvaluation, Payload: map[string]any{"Evaluation": map[string]any{"TriggeredBy": "job-deregister"}}},
		{Topic: api.TopicEvaluation, Payload: map[string]any{"Evaluation": "x"}},
		{Topic: api.TopicEvaluation},
	} {
		if got, ok := purgeChange(&ev); ok {
			t.Errorf("purgeChange(%v) = %+v, want none", ev.Payload, got)
		}
	}
}
