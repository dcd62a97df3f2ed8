package nomadx

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"

	"github.com/nops-dev/nops/reconcile/redact"
	"github.com/nops-dev/nops/structs"
)

// TestTree_HoldsWhatTheTextShows builds the tree of a diff with an edited
// group (a count change that forces a create), an edited task with Nomad's
// annotation, an added task and an added group: the tree holds the
// changed fields by group and task, names only what is added, keeps the
// annotations and the scheduler's counts, and agrees with the text.
func TestTree_HoldsWhatTheTextShows(t *testing.T) {
	diff := &api.JobDiff{Type: DiffTypeEdited, ID: "web",
		Fields: []*api.FieldDiff{{Type: DiffTypeEdited, Name: "Priority", Old: "50", New: "60"}},
		TaskGroups: []*api.TaskGroupDiff{
			{Type: DiffTypeEdited, Name: "web", Updates: map[string]uint64{"create/destroy update": 1, "create": 1},
				Fields: []*api.FieldDiff{{Type: DiffTypeEdited, Name: "Count", Old: "1", New: "2", Annotations: []string{"forces create"}}},
				Tasks: []*api.TaskDiff{
					{Type: DiffTypeEdited, Name: "web", Annotations: []string{"forces create/destroy update"},
						Fields: []*api.FieldDiff{{Type: DiffTypeEdited, Name: "Env[LEVEL]", Old: "info", New: "debug"}},
						Objects: []*api.ObjectDiff{{Type: DiffTypeEdited, Name: "Config",
							Fields: []*api.FieldDiff{{Type: DiffTypeEdited, Name: "image", Old: "web:1", New: "web:2"}}}}},
					{Type: DiffTypeAdded, Name: "sidecar", Annotations: []string{"forces create"},
						Fields: []*api.FieldDiff{{Type: DiffTypeAdded, Name: "Driver", New: "docker"}}},
				}},
			{Type: DiffTypeAdded, Name: "worker", Updates: map[string]uint64{"create": 1},
				Fields: []*api.FieldDiff{{Type: DiffTypeAdded, Name: "Count", New: "1"}},
				Tasks:  []*api.TaskDiff{{Type: DiffTypeAdded, Name: "worker", Fields: []*api.FieldDiff{{Type: DiffTypeAdded, Name: "Driver", New: "exec"}}}}},
		}}
	got := Tree(diff)
	field := func(typ, name, old, new string, ann ...string) structs.DiffField {
		return structs.DiffField{Type: typ, Name: name, Old: old, New: new, Annotations: ann}
	}
	want := &structs.PlanDiff{Type: DiffTypeEdited, ID: "web",
		Fields: []structs.DiffField{field(DiffTypeEdited, "Priority", "50", "60")},
		Groups: []structs.GroupDiff{
			{Type: DiffTypeEdited, Name: "web", Updates: []string{"1 create", "1 create/destroy update"},
				Fields: []structs.DiffField{field(DiffTypeEdited, "Count", "1", "2", "forces create")},
				Tasks: []structs.TaskDiff{
					{Type: DiffTypeEdited, Name: "web", Annotations: []string{"forces create/destroy update"},
						Fields:  []structs.DiffField{field(DiffTypeEdited, "Env[LEVEL]", "info", "debug")},
						Objects: []structs.DiffObject{{Type: DiffTypeEdited, Name: "Config", Fields: []structs.DiffField{field(DiffTypeEdited, "image", "web:1", "web:2")}}}},
					{Type: DiffTypeAdded, Name: "sidecar", Annotations: []string{"forces create"}},
				}},
			{Type: DiffTypeAdded, Name: "worker", Updates: []string{"1 create"}, Tasks: []structs.TaskDiff{{Type: DiffTypeAdded, Name: "worker"}}},
		}}
	if !reflect.DeepEqual(got, want) {
		g, _ := json.MarshalIndent(got, "", "  ")
		w, _ := json.MarshalIndent(want, "", "  ")
		t.Fatalf("tree\n%s\nwant\n%s", g, w)
	}
	text := FormatDiff(diff, false)
	for _, s := range []string{`"info" => "debug"`, `(1 create, 1 create/destroy update)`, `Task: "sidecar" (forces create)`, `Task Group: "worker" (1 create)`} {
		if !strings.Contains(text, s) {
			t.Errorf("the text lacks %q:\n%s", s, text)
		}
	}
	if strings.Contains(text, "docker") || strings.Contains(text, "exec") {
		t.Errorf("the text shows fields of an added task:\n%s", text)
	}
	if Tree(nil) != nil {
		t.Error("the tree of no diff is not nil")
	}
}

// TestTree_OfARedactedDiff: the tree of a redacted diff carries no planted
// secret, in a field, in a block of a secret-looking name or in a template,
// and still names each field.
func TestTree_OfARedactedDiff(t *testing.T) {
	diff := &api.JobDiff{Type: DiffTypeEdited, ID: "web", TaskGroups: []*api.TaskGroupDiff{{Type: DiffTypeEdited, Name: "web",
		Tasks: []*api.TaskDiff{{Type: DiffTypeEdited, Name: "web",
			Fields: []*api.FieldDiff{
				{Type: DiffTypeEdited, Name: "Env[DB_PASSWORD]", Old: "planted-old-secret", New: "planted-new-secret"},
				{Type: DiffTypeAdded, Name: "Env[DATABASE_URL]", New: "postgres://u:planted-url-secret@db/app"},
			},
			Objects: []*api.ObjectDiff{
				{Type: DiffTypeEdited, Name: "Template", Fields: []*api.FieldDiff{{Type: DiffTypeEdited, Name: "EmbeddedTmpl", Old: "planted-tmpl-a", New: "planted-tmpl-b"}}},
				{Type: DiffTypeAdded, Name: "Config", Fields: []*api.FieldDiff{{Type: DiffTypeAdded, Name: "auth_token", New: "planted-config-secret"}}},
			}}}}}}
	tree := Tree(redact.New().Diff(diff))
	raw, _ := json.Marshal(tree)
	if strings.Contains(string(raw), "planted") {
		t.Fatalf("the tree of a redacted diff shows a planted secret:\n%s", raw)
	}
	for _, name := range []string{"Env[DB_PASSWORD]", "EmbeddedTmpl", "auth_token", redact.Redacted, "postgres://"} {
		if !strings.Contains(string(raw), name) {
			t.Errorf("the tree lacks %q:\n%s", name, raw)
		}
	}
}
