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

// TestActivity_Payloads: deployment and allocation events give the job,
// the Nomad deployment and the status; garbage gives nothing, not a panic.
func TestActivity_Payloads(t *testing.T) {
	for _, c := range []struct {
		name string
		ev   api.Event
		want Activity
		ok   bool
	}{
		{"deployment", api.Event{Topic: api.TopicDeployment, Payload: map[string]any{"Deployment": map[string]any{
			"ID": "d1", "JobID": "web", "Namespace": "prod", "Status": "successful"}}},
			Activity{Topic: "Deployment", Namespace: "prod", JobID: "web", DeploymentID: "d1", Status: "successful"}, true},
		{"allocation", api.Event{Topic: api.TopicAllocation, Payload: map[string]any{"Allocation": map[string]any{
			"JobID": "hook-1/dispatch-9", "Namespace": "default", "ClientStatus": "complete"}}},
			Activity{Topic: "Allocation", Namespace: "default", JobID: "hook-1/dispatch-9", Status: "complete",
				Alloc: AllocState{Namespace: "default", JobID: "hook-1/dispatch-9", ClientStatus: "complete"}}, true},
		{"allocation health", api.Event{Topic: api.TopicAllocation, Payload: map[string]any{"Allocation": map[string]any{
			"ID": "a1", "JobID": "web", "Namespace": "prod", "ClientStatus": "running", "DesiredStatus": "run", "JobVersion": 3.0,
			"ModifyIndex": 42.0, "NextAllocation": "", "DeploymentID": "d1", "DeploymentStatus": map[string]any{"Healthy": true}}}},
			Activity{Topic: "Allocation", Namespace: "prod", JobID: "web", DeploymentID: "d1", Status: "running",
				Alloc: AllocState{ID: "a1", Namespace: "prod", JobID: "web", JobVersion: 3, DesiredStatus: "run", ClientStatus: "running",
					InDeployment: true, Judged: true, Healthy: true, ModifyIndex: 42}}, true},
		{"no payload", api.Event{Topic: api.TopicDeployment}, Activity{Topic: "Deployment"}, false},
		{"garbage", api.Event{Topic: api.TopicAllocation, Payload: map[string]any{"Allocation": []any{1}}},
			Activity{Topic: "Allocation"}, false},
		{"wrong types", api.Event{Topic: api.TopicAllocation, Payload: map[string]any{"Allocation": map[string]any{
			"JobID": 3, "DeploymentID": true, "ClientStatus": 1.5}}}, Activity{Topic: "Allocation"}, false},
		{"other topic", api.Event{Topic: api.TopicNode, Payload: map[string]any{"Node": map[string]any{"ID": "n"}}},
			Activity{Topic: "Node"}, false},
	} {
		got, ok := activity(&c.ev)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: activity = %+v %v, want %+v %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
