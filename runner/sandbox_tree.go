package runner

import (
	"context"
	"fmt"
	"io"
	"time"
)

// auditBatch is how many transfer records one audit write carries.
const auditBatch = 512

// treeAudit passes each record of a tree transfer on to each, and to the
// audit log in batches, as one-file transfers record theirs.
type treeAudit struct {
	sb   *Sandbox
	each func(Transfer)
	evs  []map[string]any
	err  error
}

func (ta *treeAudit) record(tr Transfer) {
	ta.evs = append(ta.evs, map[string]any{"event": "transfer", "sandbox_id": ta.sb.id, "direction": tr.Direction, "path": tr.Path,
		"size": tr.Size, "sha256": tr.SHA256, "mime": tr.MIME, "decision": tr.Decision, "reason": string(tr.Reason)})
	if len(ta.evs) >= auditBatch {
		ta.flush()
	}
	if ta.each != nil {
		ta.each(tr)
	}
}

func (ta *treeAudit) flush() {
	if len(ta.evs) == 0 || ta.err != nil {
		return
	}
	lc, err := ta.sb.r.lifecycle()
	if err == nil {
		if err = lc.Audit().Append(ta.evs...); err != nil {
			err = fmt.Errorf("recording the transfer: %w", err)
		}
	}
	ta.evs, ta.err = ta.evs[:0], err
}

// done writes what is left, counts the transfer as activity and joins
// an audit failure to err.
func (ta *treeAudit) done(err error) error {
	ta.flush()
	updateInfo(ta.sb.r.root, ta.sb.id, func(cur *SandboxInfo) error { cur.LastActivity = time.Now().UTC(); return nil })
	if ta.err != nil {
		return also(err, ta.err)
	}
	return err
}

// UploadTree writes the tar stream rd beneath the directory dir, in the
// workspace or /tmp, within the workspace's size for the stream and for
// each file; see Areas.UploadTree. each gets every entry's record.
func (sb *Sandbox) UploadTree(ctx context.Context, dir string, rd io.Reader, each func(Transfer)) (TreeSummary, error) {
	si, err := sb.alive()
	if err != nil {
		return TreeSummary{}, err
	}
	ta := &treeAudit{sb: sb, each: each}
	sum, err := si.Areas.UploadTree(ctx, dir, rd, SessionTree(si.WorkspaceBytes), ta.record)
	return sum, ta.done(err)
}

// DownloadTree passes the tree at the directory dir through the artifact
// scanner's one-file check and the sandbox's allowlist into sink; see
// Areas.DownloadTree. Dotfiles are refused unless dotfiles is set.
func (sb *Sandbox) DownloadTree(ctx context.Context, dir string, sink TreeSink, dotfiles bool, each func(Transfer)) (TreeSummary, error) {
	si, err := sb.alive()
	if err != nil {
		return TreeSummary{}, err
	}
	opt := SessionDownload(si.WorkspaceBytes)
	if si.DownloadTypes != nil {
		opt.Types = si.DownloadTypes
	}
	opt.AllowDotfiles = dotfiles
	ta := &treeAudit{sb: sb, each: each}
	sum, err := si.Areas.DownloadTree(ctx, dir, sink, opt, SessionTree(si.WorkspaceBytes), ta.record)
	return sum, ta.done(err)
}

// IsDir says whether p is a directory in the sandbox's areas; see
// Areas.IsDir.
func (sb *Sandbox) IsDir(p string) (bool, error) {
	si, err := sb.alive()
	if err != nil {
		return false, err
	}
	return si.Areas.IsDir(p)
}

// TreeReport is one tree transfer as the faces show it: every entry's
// record, in the order decided, and the counts.
type TreeReport struct {
	Transfers []Transfer  `json:"transfers"`
	Summary   TreeSummary `json:"summary"`
}
