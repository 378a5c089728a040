package runner

import (
	"context"
	"fmt"
	"io"

	"github.com/airlock-sandbox/airlock/lifecycle"
)

// auditBatch is how many transfer records one audit write carries.
const auditBatch = 512

// TransferAudit passes each record of a transfer on to each, and to the
// audit log in batches, as one-file transfers record theirs: a local
// sandbox's (its tree transfers), or, from NewTransferAudit, one's on a
// cluster, in the audit log of the root that moved its files.
type TransferAudit struct {
	id    string
	log   func() (*lifecycle.Audit, error)
	touch func()
	each  func(Transfer)
	evs   []map[string]any
	err   error
}

// NewTransferAudit records the transfers of sandbox id, which this root
// does not hold (it lives on a cluster), in root's audit log.
func NewTransferAudit(root, id string, each func(Transfer)) *TransferAudit {
	a := lifecycle.OpenAudit(lifecycle.AuditPath(root))
	return &TransferAudit{id: id, log: func() (*lifecycle.Audit, error) { return a, nil }, touch: func() {}, each: each}
}

// transferAudit records a tree transfer in progress (see transferring)
// until its Done.
func (sb *Sandbox) transferAudit(each func(Transfer)) (*TransferAudit, error) {
	done, err := sb.transferring()
	if err != nil {
		return nil, err
	}
	return &TransferAudit{id: sb.id, each: each, touch: done,
		log: func() (*lifecycle.Audit, error) {
			lc, err := sb.r.lifecycle()
			if err != nil {
				return nil, err
			}
			return lc.Audit(), nil
		}}, nil
}

// transferEvent is tr's audit event.
func transferEvent(id string, tr Transfer) map[string]any {
	return map[string]any{"event": "transfer", "sandbox_id": id, "direction": tr.Direction, "path": tr.Path,
		"size": tr.Size, "sha256": tr.SHA256, "mime": tr.MIME, "decision": tr.Decision, "reason": string(tr.Reason)}
}

// Record takes one transfer's record.
func (ta *TransferAudit) Record(tr Transfer) {
	ta.evs = append(ta.evs, transferEvent(ta.id, tr))
	if len(ta.evs) >= auditBatch {
		ta.flush()
	}
	if ta.each != nil {
		ta.each(tr)
	}
}

func (ta *TransferAudit) flush() {
	if len(ta.evs) == 0 || ta.err != nil {
		return
	}
	a, err := ta.log()
	if err == nil {
		if err = a.Append(ta.evs...); err != nil {
			err = fmt.Errorf("recording the transfer: %w", err)
		}
	}
	ta.evs, ta.err = ta.evs[:0], err
}

// Done writes what is left, counts the transfer as activity and joins
// an audit failure to err.
func (ta *TransferAudit) Done(err error) error {
	ta.flush()
	ta.touch()
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
	ta, err := sb.transferAudit(each)
	if err != nil {
		return TreeSummary{}, err
	}
	sum, err := si.Areas.UploadTree(ctx, dir, rd, SessionTree(si.WorkspaceBytes), ta.Record)
	return sum, ta.Done(err)
}

// DownloadTree passes the tree at the directory dir through the artifact
// scanner's one-file check and the sandbox's allowlist into sink; see
// Areas.DownloadTree. Dotfiles are refused unless dotfiles is set.
func (sb *Sandbox) DownloadTree(ctx context.Context, dir string, sink TreeSink, dotfiles bool, each func(Transfer)) (TreeSummary, error) {
	si, err := sb.alive()
	if err != nil {
		return TreeSummary{}, err
	}
	opt := si.download()
	opt.AllowDotfiles = dotfiles
	ta, err := sb.transferAudit(each)
	if err != nil {
		return TreeSummary{}, err
	}
	sum, err := si.Areas.DownloadTree(ctx, dir, sink, opt, SessionTree(si.WorkspaceBytes), ta.Record)
	return sum, ta.Done(err)
}

// DownloadFiles passes the files at paths, in order, through the one-file
// check of Download into sink, MaxDownloadFiles paths at most and the
// workspace's size in all; see Areas.DownloadFiles. each gets every
// path's record, in order.
func (sb *Sandbox) DownloadFiles(ctx context.Context, paths []string, sink TreeSink, each func(Transfer)) (TreeSummary, error) {
	si, err := sb.alive()
	if err != nil {
		return TreeSummary{}, err
	}
	opt := si.download()
	lim := TreeLimits{Files: MaxDownloadFiles, Bytes: si.WorkspaceBytes, FileBytes: si.WorkspaceBytes}
	ta, err := sb.transferAudit(each)
	if err != nil {
		return TreeSummary{}, err
	}
	sum, err := si.Areas.DownloadFiles(ctx, paths, sink, opt, lim, ta.Record)
	return sum, ta.Done(err)
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

// download is the one-file check of the sandbox's downloads.
func (si SandboxInfo) download() DownloadOptions {
	opt := SessionDownload(si.WorkspaceBytes)
	if si.DownloadTypes != nil {
		opt.Types = si.DownloadTypes
	}
	return opt
}
