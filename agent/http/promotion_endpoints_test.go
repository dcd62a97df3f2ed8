package agenthttp_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/nops-dev/nops/structs"
	"github.com/nops-dev/nops/testutil/nopstest"
)

// TestSkipRequirements_Endpoint drives POST
// /v1/deployment/{id}/skip-requirements on a real server: bad input is a
// 400 that changes nothing, an unknown deployment a 404; a deployment
// waiting in detected is marked with the actor and gets an event with the
// reason; a second skip, or one of a deployment past detected, is a 409.
func TestSkipRequirements_Endpoint(t *testing.T) {
	s := nopstest.StartDev(t)
	detected := &structs.Deployment{ID: uuid.NewString(), Cluster: "prod", Namespace: "default", JobID: "web", Repository: "ops",
		Commit: strings.Repeat("ab", 20), File: "jobs/web.nomad.hcl", Policy: structs.PolicyAuto, State: structs.StateDetected, SpecHash: "spec-web"}
	meta := structs.WriteMeta{Time: time.Now().UTC(), Actor: "nops"}
	if _, err := s.Apply(structs.DeploymentCreateRequestType, &structs.DeploymentCreateRequest{WriteMeta: meta, Deployment: detected}); err != nil {
		t.Fatal(err)
	}
	path := "/v1/deployment/" + detected.ID + "/skip-requirements"

	for _, bad := range []struct {
		name string
		body any
		code int
		want string
	}{
		{"no body", nil, http.StatusBadRequest, ""},
		{"an empty reason", map[string]string{"reason": " "}, http.StatusBadRequest, "reason: required"},
		{"a reason too long", map[string]string{"reason": strings.Repeat("x", structs.MaxTextLen+1)}, http.StatusBadRequest, "at most"},
		{"an unknown field", map[string]string{"reason": "ok", "force": "yes"}, http.StatusBadRequest, ""},
		{"garbage", "\x00\xffnot json", http.StatusBadRequest, "malformed JSON"},
		{"a truncated body", `{"reason":"ok"`, http.StatusBadRequest, "malformed JSON"},
		{"a reason of the wrong type", `{"reason":["ok"]}`, http.StatusBadRequest, "must be string"},
		{"data after the body", `{"reason":"ok"} {"reason":"again"}`, http.StatusBadRequest, "after the JSON value"},
		{"a huge body", `{"reason":"` + strings.Repeat("x", 2<<20) + `"}`, http.StatusRequestEntityTooLarge, "too large"},
	} {
		code, body := s.Do("POST", path, bad.body, nil)
		if code != bad.code || !strings.Contains(body, bad.want) {
			t.Errorf("%s: %d %s; want %d naming %q", bad.name, code, body, bad.code, bad.want)
		}
	}
	if d, _ := s.State().Deployment(detected.ID); d.SkipRequirements || len(s.Events(detected.ID)) != 1 {
		t.Fatalf("refused requests changed the deployment: %+v, events %d", d, len(s.Events(detected.ID)))
	}
	if code, body := s.Do("POST", "/v1/deployment/"+uuid.NewString()+"/skip-requirements", map[string]string{"reason": "x"}, nil); code != http.StatusNotFound {
		t.Errorf("unknown deployment: %d %s", code, body)
	}

	var got structs.Deployment
	if code, body := s.Do("POST", path, map[string]string{"reason": "staging is down for maintenance"}, &got); code != http.StatusOK {
		t.Fatalf("skip: %d %s", code, body)
	}
	if !got.SkipRequirements || got.SkipRequirementsBy != "tester" || got.State != structs.StateDetected {
		t.Fatalf("answer: %+v", got)
	}
	evs := s.Events(detected.ID)
	last := evs[len(evs)-1]
	if last.Actor != "tester" || last.Message != "promotion order skipped by tester: staging is down for maintenance" || last.Cluster != "prod" {
		t.Fatalf("audit event: %+v", last)
	}
	if code, body := s.Do("POST", path, map[string]string{"reason": "again"}, nil); code != http.StatusConflict || !strings.Contains(body, "already skips") {
		t.Errorf("second skip: %d %s", code, body)
	}

	pending := s.CreatePending("default", "api")
	if code, body := s.Do("POST", "/v1/deployment/"+pending.ID+"/skip-requirements", map[string]string{"reason": "x"}, nil); code != http.StatusConflict || !strings.Contains(body, "not detected") {
		t.Errorf("skip of a deployment pending approval: %d %s", code, body)
	}
}
