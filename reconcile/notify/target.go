package notify

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/nops-dev/nops/structs"
)

// ErrUnknownTarget is returned for a target name no notify block defines.
var ErrUnknownTarget = errors.New("no such notify target")

// Message is what a sender sends: one notification, for one target.
type Message struct {
	Notification *structs.Notification `json:"notification"`
	// Target is the name of the notify block.
	Target string `json:"target"`
	// IdempotencyKey is the same on every attempt to deliver this
	// notification to this target.
	IdempotencyKey string `json:"idempotency_key"`
	// Link points at the dashboard page of the notification's object, when
	// ui_url is set.
	Link string `json:"link,omitempty"`
}

// Sender delivers a message to one kind of receiver. An error means the
// receiver did not accept it; the message is sent again later.
type Sender interface {
	Send(ctx context.Context, m *Message) error
}

// Target is one configured notify block: its filters, its retry limits and
// its sender.
type Target struct {
	Name         string
	Events       []string
	Namespaces   []string
	Jobs         []string
	GiveUpAfter  time.Duration
	RetryInitial time.Duration
	RetryMax     time.Duration
	Sender       Sender
}

// Matches reports whether the target wants the notification: its kind is
// in the events filter (empty: all), and its job matches the namespace and
// job globs. A notification about no job matches only a target with no
// globs.
func (t *Target) Matches(n *structs.Notification) bool {
	if len(t.Events) > 0 && !slices.Contains(t.Events, n.Kind) {
		return false
	}
	if len(t.Namespaces) == 0 && len(t.Jobs) == 0 {
		return true
	}
	if n.JobKey() == "" {
		return false
	}
	return structs.GlobAny(t.Namespaces, n.Namespace) && structs.GlobAny(t.Jobs, n.JobID)
}

// link returns the dashboard page of a notification's object, or "".
func link(uiURL string, n *structs.Notification) string {
	if uiURL == "" {
		return ""
	}
	base := strings.TrimRight(uiURL, "/")
	switch {
	case n.Deployment != nil:
		return base + "/ui/deployment/" + n.Deployment.ID
	case n.JobKey() != "":
		l := base + "/ui/job/" + url.PathEscape(n.Namespace) + "/" + url.PathEscape(n.JobID)
		if c := structs.ClusterName(n.Cluster); c != structs.DefaultCluster {
			l += "?cluster=" + url.QueryEscape(c)
		}
		return l
	case n.Kind == structs.NotifyWindowOpened || n.Kind == structs.NotifyWindowClosed:
		return base + "/ui/windows"
	case n.Kind == structs.NotifyLeaderChanged:
		return base + "/ui/cluster"
	}
	return base + "/ui/"
}

// Title returns a one-line human title of a notification.
func Title(n *structs.Notification) string {
	what := n.Object
	if k := n.JobKey(); k != "" {
		what = k
	}
	switch n.Kind {
	case structs.NotifyCreated:
		return "Deployment created for " + what
	case structs.NotifyPendingApproval:
		return "Deployment of " + what + " waits for approval"
	case structs.NotifyApproval:
		return "Deployment of " + what + " approved by " + n.Actor + ": " + approvalCount(n.Deployment) + " approvals"
	case structs.NotifyApproved:
		return "Deployment of " + what + " approved by " + n.Actor
	case structs.NotifyExpired:
		return "Deployment of " + what + " expired waiting for approval"
	case structs.NotifyRejected:
		return "Deployment of " + what + " rejected by " + n.Actor
	case structs.NotifyApplying:
		return "Deployment of " + what + " is applying"
	case structs.NotifyCompleted:
		return "Deployment of " + what + " completed"
	case structs.NotifyFailed:
		return "Deployment of " + what + " failed"
	case structs.NotifySuperseded:
		return "Deployment of " + what + " superseded"
	case structs.NotifyBlocked:
		return "Job " + what + " is blocked"
	case structs.NotifyUnblocked:
		return "Job " + what + " is unblocked"
	case structs.NotifyPaused:
		if what == structs.GlobalPauseKey {
			return "Every job paused by " + n.Actor
		}
		return "Job " + what + " paused by " + n.Actor
	case structs.NotifyResumed:
		if what == structs.GlobalPauseKey {
			return "Every job resumed by " + n.Actor
		}
		return "Job " + what + " resumed by " + n.Actor
	case structs.NotifyWindowOpened:
		return "Sync window " + what + " opened"
	case structs.NotifyWindowClosed:
		return "Sync window " + what + " closed"
	case structs.NotifyRepoFailing:
		return "Repository " + what + " fails to fetch"
	case structs.NotifyRepoRecovered:
		return "Repository " + what + " fetches again"
	case structs.NotifyLeaderChanged:
		return "Cluster leader is now " + n.To
	case structs.NotifyTest:
		return "Test notification from Nops"
	}
	return n.Kind + " " + what
}

// approvalCount is "1 of 2": the approvals a deployment has of those it
// needs; "" for a notification that carries no deployment.
func approvalCount(d *structs.NotificationDeployment) string {
	if d == nil {
		return ""
	}
	return fmt.Sprintf("%d of %d", len(d.Approvals), max(1, d.ApprovalsRequired))
}

// Approvals is what a notification says of a deployment's approvals:
// "1 of 2: alice"; "" unless it waits for approval or was approved.
func Approvals(d *structs.NotificationDeployment) string {
	if d == nil || d.ApprovalsRequired == 0 {
		return ""
	}
	s := approvalCount(d)
	if len(d.Approvals) > 0 {
		s += ": " + strings.Join(d.Approvals, ", ")
	}
	return s
}
