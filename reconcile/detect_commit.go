package reconcile

import (
	"context"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/nops-dev/nops/reconcile/filediff"
	"github.com/nops-dev/nops/reconcile/gitwatch"
	"github.com/nops-dev/nops/structs"
)

// commitReader reads the commit context of new deployments (SPEC section
// 15) from the detector's git watcher and the replicated state.
type commitReader struct {
	srv    Server
	git    *gitwatch.Watcher
	redact func(text string) string
	logger hclog.Logger
}

// record records on a new deployment what an approver reads beside the
// plan diff: the commit's message, author, committer, time and link, cut
// to the bounds the FSM keeps, and the file diff of the job file and its
// variables file since the job's last completed deployment, redacted with
// the rules of plan diffs. A file diff git cannot give (the older commit
// is gone from the remote) says so on its first line and shows the files
// as added; it fails no deployment.
func (m commitReader) record(ctx context.Context, d *declared, dep *structs.Deployment) error {
	dep.CommitMessage = structs.TruncateText(d.info.Message, structs.MaxTextLen)
	dep.CommitAuthor = structs.TruncateText(d.info.Author, structs.MaxTextLen)
	dep.CommitCommitter = structs.TruncateText(d.info.Committer, structs.MaxTextLen)
	dep.CommitSigner = structs.TruncateText(d.info.Signer, structs.MaxTextLen)
	dep.CommitTime = d.info.Time
	if len(d.info.URL) <= structs.MaxTextLen {
		dep.CommitURL = d.info.URL
	}
	last, err := m.srv.State().LastCompletedDeployment(dep.Cluster, dep.Namespace, dep.JobID)
	if err != nil {
		return fmt.Errorf("read last completed deployment: %w", err)
	}
	dep.FileDiff = structs.CapFileDiff(m.fileDiff(ctx, d, last))
	return nil
}

// fileDiff returns the redacted unified diff of a job's file and its
// variables file from the last completed deployment (nil: none, every
// file is added) to d.
func (m commitReader) fileDiff(ctx context.Context, d *declared, last *structs.Deployment) string {
	to := [2]filediff.Version{{Path: d.src.Path, Text: d.src.Content}, {Path: d.src.VarsPath, Text: d.src.Vars}}
	var from [2]filediff.Version
	note := ""
	if last != nil && last.Commit != "" && last.File != "" {
		files, err := m.filesAt(ctx, last)
		if err != nil {
			m.logger.Warn("file diff: the files of the last completed deployment could not be read; showing the files whole",
				"job", d.key(), "deployment", last.ID, "commit", structs.ShortID(last.Commit), "error", err)
			note = fmt.Sprintf("# The files at commit %s, of the last completed deployment %s, could not be read from git (%v): the files are shown whole.\n",
				structs.ShortID(last.Commit), structs.ShortID(last.ID), err)
		}
		for i, p := range []string{last.File, gitwatch.VarsPathFor(last.File)} {
			if text, ok := files[p]; ok {
				from[i] = filediff.Version{Path: p, Text: text}
			}
		}
	}
	return note + filediff.Unified(from[0], to[0], m.redact) + filediff.Unified(from[1], to[1], m.redact)
}

// filesAt reads the job file and the variables file of a deployment at its
// commit.
func (m commitReader) filesAt(ctx context.Context, dep *structs.Deployment) (map[string]string, error) {
	if m.git == nil {
		return nil, fmt.Errorf("no repository is watched")
	}
	return m.git.FilesAt(ctx, dep.Repository, dep.Commit, dep.File, gitwatch.VarsPathFor(dep.File))
}
