package nomadx

import (
	"context"
	"fmt"

	"github.com/hashicorp/nomad/api"
)

// JobChange is one change of a job reported by Nomad's event stream.
type JobChange struct {
	// Type is Nomad's event type, for example "JobRegistered" or
	// "JobDeregistered".
	Type      string
	Namespace string
	JobID     string
	// JobModifyIndex is the job's modify index after the change (0 when
	// the event does not carry it).
	JobModifyIndex uint64
	// Deleted is set for a deregister (a stop, or a purge from Nomad).
	Deleted bool
}

// Activity is a change of a Nomad deployment or allocation reported by the
// event stream: what can move a deployment that waits for health, or a hook
// run that waits for its child job.
type Activity struct {
	// Topic is "Deployment" or "Allocation".
	Topic     string
	Namespace string
	JobID     string
	// DeploymentID is the Nomad deployment (of an allocation, the one it
	// belongs to; may be empty).
	DeploymentID string
	// Status is the deployment's status or the allocation's client status.
	Status string
	// Alloc is the allocation of an allocation event (zero for a
	// deployment's), for the health counts.
	Alloc AllocState
}

// JobChanges is one batch of the event stream: the changes Nomad applied at
// Index, or the error that ended the stream (the last batch sent).
type JobChanges struct {
	Index   uint64
	Changes []JobChange
	// Activity are the deployment and allocation changes of the batch.
	Activity []Activity
	Err      error
}

// WatchJobs subscribes to the Job topic of Nomad's event stream (and to the
// Evaluation topic, for the deregisters that leave no job event, and to the
// Deployment and Allocation topics, whose changes move deployments waiting
// for health and hook runs) (/v1/event/stream) in namespace ns ("*" for all), from index (0 for now
// on; Nomad starts at the oldest event it still holds when index is
// older). It returns once Nomad accepted the subscription. The channel is
// closed when ctx ends or the stream breaks; a break is sent first as a
// batch with Err set. Opening the stream counts as one request
// ("event.stream"); its heartbeats are not requests.
func (c *Client) WatchJobs(ctx context.Context, ns string, index uint64) (<-chan JobChanges, error) {
	ns = namespaceOrDefault(ns)
	q := &api.QueryOptions{Namespace: ns}
	in, err := c.api.EventStream().Stream(withOperation(ctx, "event.stream"),
		map[api.Topic][]string{api.TopicJob: {"*"}, api.TopicEvaluation: {"*"},
			api.TopicDeployment: {"*"}, api.TopicAllocation: {"*"}}, index, q)
	if err != nil {
		return nil, fmt.Errorf("subscribe to the job events of namespace %q: %w", ns, err)
	}
	out := make(chan JobChanges, 1)
	go func() {
		defer close(out)
		for evs := range in {
			batch := JobChanges{Index: evs.Index}
			if evs.Err != nil {
				batch.Err = fmt.Errorf("job event stream of namespace %q: %w", ns, evs.Err)
			}
			for i := range evs.Events {
				ev := &evs.Events[i]
				switch ev.Topic {
				case api.TopicJob:
					batch.Changes = append(batch.Changes, jobChange(ev))
				case api.TopicEvaluation:
					// A purge leaves no job event in Nomad 1.6, only
					// the evaluation of the deregister.
					if ch, ok := purgeChange(ev); ok {
						batch.Changes = append(batch.Changes, ch)
					}
				case api.TopicDeployment, api.TopicAllocation:
					if a, ok := activity(ev); ok {
						batch.Activity = append(batch.Activity, a)
					}
				}
			}
			select {
			case out <- batch:
			case <-ctx.Done():
				return
			}
			if batch.Err != nil {
				return
			}
		}
	}()
	return out, nil
}

// jobChange reads the few fields Nops needs from an event's job payload,
// without decoding the whole job.
func jobChange(ev *api.Event) JobChange {
	ch := JobChange{Type: ev.Type, JobID: ev.Key}
	if d, ok := ev.Payload["Deleted"].(bool); ok {
		ch.Deleted = d
	}
	job, _ := ev.Payload["Job"].(map[string]any)
	if job == nil {
		return ch
	}
	if s, ok := job["Namespace"].(string); ok {
		ch.Namespace = s
	}
	if s, ok := job["ID"].(string); ok && s != "" {
		ch.JobID = s
	}
	switch v := job["JobModifyIndex"].(type) {
	case float64:
		if v > 0 {
			ch.JobModifyIndex = uint64(v)
		}
	case uint64:
		ch.JobModifyIndex = v
	}
	return ch
}

// purgeChange turns the evaluation of a job deregister into a change of
// that job.
func purgeChange(ev *api.Event) (JobChange, bool) {
	eval, _ := ev.Payload["Evaluation"].(map[string]any)
	if eval == nil {
		return JobChange{}, false
	}
	if by, _ := eval["TriggeredBy"].(string); by != "job-deregister" {
		return JobChange{}, false
	}
	ch := JobChange{Type: "JobDeregistered", Deleted: true}
	ch.JobID, _ = eval["JobID"].(string)
	ch.Namespace, _ = eval["Namespace"].(string)
	return ch, ch.JobID != ""
}

// activity reads the few fields Nops needs from a deployment or allocation
// event.
func activity(ev *api.Event) (Activity, bool) {
	a := Activity{Topic: string(ev.Topic)}
	var obj map[string]any
	switch ev.Topic {
	case api.TopicDeployment:
		obj, _ = ev.Payload["Deployment"].(map[string]any)
		if obj == nil {
			return a, false
		}
		a.DeploymentID, _ = obj["ID"].(string)
		a.Status, _ = obj["Status"].(string)
	case api.TopicAllocation:
		obj, _ = ev.Payload["Allocation"].(map[string]any)
		if obj == nil {
			return a, false
		}
		a.DeploymentID, _ = obj["DeploymentID"].(string)
		a.Status, _ = obj["ClientStatus"].(string)
		a.Alloc = allocState(obj)
	default:
		return a, false
	}
	a.JobID, _ = obj["JobID"].(string)
	a.Namespace, _ = obj["Namespace"].(string)
	return a, a.JobID != "" || a.DeploymentID != ""
}

// allocState reads what the health counts need from an allocation event's
// payload (JSON numbers are float64 there).
func allocState(obj map[string]any) AllocState {
	var s AllocState
	s.ID, _ = obj["ID"].(string)
	s.Namespace, _ = obj["Namespace"].(string)
	s.JobID, _ = obj["JobID"].(string)
	s.DesiredStatus, _ = obj["DesiredStatus"].(string)
	s.ClientStatus, _ = obj["ClientStatus"].(string)
	s.NextAllocation, _ = obj["NextAllocation"].(string)
	if v, ok := obj["JobVersion"].(float64); ok && v >= 0 {
		s.JobVersion = uint64(v)
	}
	if v, ok := obj["ModifyIndex"].(float64); ok && v >= 0 {
		s.ModifyIndex = uint64(v)
	}
	if d, ok := obj["DeploymentStatus"].(map[string]any); ok {
		s.InDeployment = true
		s.Healthy, s.Judged = d["Healthy"].(bool)
	}
	return s
}
