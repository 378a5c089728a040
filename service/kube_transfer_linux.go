package service

// File transfer with a sandbox on a cluster: there are no host-side areas
// to open, so each file goes through one pod exec of the image's sh and
// cat. What the rules of a local transfer check on the host side is split:
// the sandbox path is checked here (clean, under /home/user or /tmp, a
// relative one the workspace's, every component a name a local sandbox
// takes; a download's without a component starting with '.' unless
// dotfiles are allowed); the file type and symlink checks (of every
// component) run inside the sandbox, where a link can only reach the
// sandbox's own files; and a download's content passes the artifact
// scanner's one-file checks here, on the stream
// (artifacts.CheckStream: name, type from the content, extension, cap),
// before a byte reaches the host file.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/internal/capbuf"
	"github.com/airlock-sandbox/airlock/kube/cluster"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/units"
)

// kubeDownloadCap caps one download, as the default workspace does; the
// node's exec output cap may be lower, and then ends the exec first.
const kubeDownloadCap = units.Bytes(1 << 30)

// execStderrCap is how much of a transfer exec's stderr is kept, for its
// error: the sandbox writes it, and may write without end.
const execStderrCap = 4 << 10

// Exit codes of the transfer scripts, for a path that cannot be used.
const (
	cpNotRegular = 65
	cpNotFound   = 66
	cpSymlink    = 67
)

const (
	// noLinks, the start of every transfer script, exits 67 when "$1" or
	// any directory on its way up to /home/user or /tmp (those included)
	// is a symlink: sh
	// cannot open beneath a root, so each component is tested. A link
	// swapped in after the test reaches only the sandbox's own files.
	noLinks = `p=$1; while [ -L "$p" ] && exit 67; case $p in ` + runner.WorkspaceDir + `|/tmp) false;; /*/*) ;; *) false;; esac; do p=${p%/*}; done; `

	downloadScript = noLinks + `[ -e "$1" ] || exit 66; [ -f "$1" ] || exit 65; exec cat -- "$1"`
	uploadScript   = noLinks + `[ -e "$1" ] && [ ! -f "$1" ] && exit 65; [ -d "${1%/*}" ] || exit 66; exec cat > "$1"`
)

// maxKubePath bounds a transfer's sandbox path, as a local sandbox's.
const maxKubePath = 4096

// kubePath checks a sandbox path of a transfer and returns it absolute:
// a relative path is the workspace's, and each component below
// /home/user or /tmp must pass artifacts.CheckName, as a local sandbox's.
func kubePath(dir, p string) (string, error) {
	refuse := func(detail string) error {
		return &runner.TransferError{Direction: dir, Path: p, Reason: runner.ReasonInvalidPath, Detail: detail, Err: errdefs.ErrInvalidArgument}
	}
	full := p
	if p != "" && !path.IsAbs(p) {
		full = runner.WorkspaceDir + "/" + p
	}
	switch {
	case len(full) > maxKubePath:
		return "", refuse(fmt.Sprintf("the path is longer than %d bytes", maxKubePath))
	case p == "" || path.Clean(full) != full || strings.ContainsAny(p, "\x00\n"):
		return "", refuse("give a clean path, without empty, \".\" or \"..\" components")
	case !strings.HasPrefix(full, runner.WorkspaceDir+"/") && !strings.HasPrefix(full, "/tmp/"):
		return "", refuse("a sandbox on Kubernetes moves files in and out of " + runner.WorkspaceDir + " and /tmp only")
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(full, runner.WorkspaceDir+"/"), "/tmp/")
	for _, c := range strings.Split(rel, "/") {
		if why := artifacts.CheckName(c); why != "" {
			return "", refuse(why)
		}
	}
	return full, nil
}

// kubeHidden refuses the absolute sandbox path p of a download when a
// component of it starts with '.', as a local sandbox's download does
// (runner's Areas.download and openTree): tools act on dotfiles by
// themselves (.git, .ssh, .bashrc). Neither /home/user nor /tmp has one.
func kubeHidden(p string) error {
	for _, c := range strings.Split(p[1:], "/") {
		if strings.HasPrefix(c, ".") {
			return runner.Refusal(artifacts.ReasonHiddenName, "%q starts with '.', and tools act on dotfiles by themselves (.git, .ssh, .bashrc)", artifacts.Escape(c))
		}
	}
	return nil
}

// scriptRefusal is the refusal a transfer script's exit code stands for,
// nil for any other code.
func scriptRefusal(dir, p string, code int) error {
	var r artifacts.Reason
	var detail string
	var class error = errdefs.ErrInvalidArgument
	switch code {
	case cpNotRegular:
		r, detail = artifacts.ReasonNotRegular, "not a regular file"
	case cpSymlink:
		r, detail = runner.ReasonSymlink, "the name, or a directory on its way, is a symlink, which airlock never follows"
	case cpNotFound:
		r, detail, class = runner.ReasonNotFound, "nothing is there, or a directory on the way is missing", errdefs.ErrNotFound
	default:
		return nil
	}
	return &runner.TransferError{Direction: dir, Path: p, Reason: r, Detail: detail, Err: class}
}

// UploadKube writes r, at most max bytes, to sandboxPath in sandbox id on
// its cluster (a relative path is the workspace's), making its missing
// directories. It may replace a regular file there, never anything else.
// The transfer's record goes to the audit log of the service's root.
func (s *Service) UploadKube(ctx context.Context, id, sandboxPath string, r io.Reader, max int64) (runner.Transfer, error) {
	tr, err := s.uploadKube(ctx, id, sandboxPath, r, max, true)
	return s.auditKube(id, tr, err)
}

// auditKube records tr, a transfer of sandbox id on its cluster, in the
// audit log of the service's root, as a local sandbox's are.
func (s *Service) auditKube(id string, tr runner.Transfer, err error) (runner.Transfer, error) {
	a := runner.NewTransferAudit(s.root, id, nil)
	a.Record(tr)
	return tr, a.Done(err)
}

// uploadKube is UploadKube, unrecorded; it makes the file's missing
// directories only with parents set.
func (s *Service) uploadKube(ctx context.Context, id, sandboxPath string, r io.Reader, max int64, parents bool) (runner.Transfer, error) {
	tr := runner.Transfer{Direction: runner.DirectionUpload, Path: sandboxPath, Decision: runner.DecisionRefused}
	full, err := kubePath(tr.Direction, sandboxPath)
	if err != nil {
		return refused(tr, err)
	}
	if d := path.Dir(full); parents && d != runner.WorkspaceDir && d != "/tmp" {
		if err := s.kubeMkdir(ctx, id, d, true); err != nil {
			if runner.IsRefusal(err) {
				return refused(tr, err)
			}
			return tr, err
		}
	}
	h := sha256.New()
	counted := &countReader{r: io.TeeReader(io.LimitReader(r, max+1), h)}
	stderr := capbuf.New(execStderrCap)
	code, err := s.claims().Exec(ctx, id, cluster.Exec{Argv: []string{"sh", "-c", uploadScript, "airlock-cp", full}, Stdin: counted, Stderr: stderr})
	if err != nil {
		return tr, err
	}
	if counted.n > max {
		return refused(tr, &runner.TransferError{Direction: tr.Direction, Path: sandboxPath, Reason: runner.ReasonTooLarge, Detail: fmt.Sprintf("over %d bytes (it grew while read)", max), Err: errdefs.ErrInvalidArgument})
	}
	if rerr := scriptRefusal(tr.Direction, sandboxPath, code); rerr != nil {
		return refused(tr, rerr)
	}
	if code != 0 {
		return tr, fmt.Errorf("%w: upload to %q in sandbox %q: cat exited %d: %s", errdefs.ErrUnavailable, sandboxPath, id, code, strings.TrimSpace(stderr.String()))
	}
	tr.Decision, tr.Size, tr.SHA256 = runner.DecisionAccepted, counted.n, hex.EncodeToString(h.Sum(nil))
	return tr, nil
}

// DownloadKube writes sandboxPath of sandbox id on its cluster (a
// relative path is the workspace's) to w, if the scanner's one-file
// checks pass; a path with a component starting with '.' is refused, as a
// local sandbox's download refuses it. On a refusal or error w may hold a
// part, and must be discarded.
func (s *Service) DownloadKube(ctx context.Context, id, sandboxPath string, w io.Writer) (runner.Transfer, error) {
	tr, err := s.downloadKube(ctx, id, sandboxPath, w, artifacts.FileOptions{MaxBytes: int64(kubeDownloadCap), Types: artifacts.SessionTypes, SourceText: true})
	return s.auditKube(id, tr, err)
}

// downloadKube is DownloadKube under the scanner's options opt.
func (s *Service) downloadKube(ctx context.Context, id, sandboxPath string, w io.Writer, opt artifacts.FileOptions) (runner.Transfer, error) {
	tr := runner.Transfer{Direction: runner.DirectionDownload, Path: sandboxPath, Decision: runner.DecisionRefused}
	full, err := kubePath(tr.Direction, sandboxPath)
	if err != nil {
		return refused(tr, err)
	}
	if !opt.AllowDotfiles {
		if err := kubeHidden(full); err != nil {
			return refused(tr, err)
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	type ended struct {
		code int
		err  error
	}
	done := make(chan ended, 1)
	stderr := capbuf.New(execStderrCap)
	go func() {
		code, err := s.claims().Exec(ctx, id, cluster.Exec{Argv: []string{"sh", "-c", downloadScript, "airlock-cp", full}, Stdout: pw, Stderr: stderr})
		pw.Close()
		done <- ended{code, err}
	}()
	a, rej, cerr := artifacts.CheckStream(ctx, pr, path.Base(full), sandboxPath, w, opt)
	if rej != nil || cerr != nil {
		cancel() // the exec ends once its output has nowhere to go
	}
	pr.CloseWithError(errors.New("download ended"))
	end := <-done
	if rej != nil {
		return refused(tr, &runner.TransferError{Direction: tr.Direction, Path: sandboxPath, Reason: rej.Reason, Detail: rej.Detail, Err: errdefs.ErrInvalidArgument})
	}
	if cerr != nil {
		// The host's side failed (a full disk): the exec's error is only
		// the pipe cut after it.
		return tr, cerr
	}
	if end.err != nil {
		return tr, end.err
	}
	if rerr := scriptRefusal(tr.Direction, sandboxPath, end.code); rerr != nil {
		return refused(tr, rerr)
	}
	if end.code != 0 {
		return tr, fmt.Errorf("%w: download of %q from sandbox %q: cat exited %d (the node's exec output cap ends an exec with a larger output): %s",
			errdefs.ErrUnavailable, sandboxPath, id, end.code, strings.TrimSpace(stderr.String()))
	}
	tr.Decision, tr.Size, tr.SHA256, tr.MIME = runner.DecisionAccepted, a.Size, a.SHA256, a.MIME
	return tr, nil
}

func refused(tr runner.Transfer, err error) (runner.Transfer, error) {
	var te *runner.TransferError
	if errors.As(err, &te) {
		tr.Reason, tr.Detail = te.Reason, te.Detail
		if te.Direction == "" {
			// A refusal made without its transfer (runner.Refusal).
			te.Direction, te.Path = tr.Direction, tr.Path
		}
	}
	return tr, err
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// Files is one sandbox's transfers of files and trees, wherever it runs.
type Files interface {
	Upload(ctx context.Context, sandboxPath string, r io.Reader, limit int64) (runner.Transfer, error)
	Download(ctx context.Context, sandboxPath string, w io.Writer) (runner.Transfer, error)
	UploadTree(ctx context.Context, dir string, r io.Reader, each func(runner.Transfer)) (runner.TreeSummary, error)
	DownloadTree(ctx context.Context, dir string, sink runner.TreeSink, dotfiles bool, each func(runner.Transfer)) (runner.TreeSummary, error)
	DownloadFiles(ctx context.Context, paths []string, sink runner.TreeSink, each func(runner.Transfer)) (runner.TreeSummary, error)
	IsDir(p string) (bool, error)
}

var (
	_ Files = (*runner.Sandbox)(nil)
	_ Files = kubeFiles{}
)

// OpenFiles returns sandbox id's transfers and the most an upload may
// write: a live sandbox's (Open), or, through its pod's exec, one on a
// cluster's (UploadKube, DownloadKube and their trees), whose IsDir asks
// under ctx.
func (s *Service) OpenFiles(ctx context.Context, id string) (f Files, limit int64, done func(), err error) {
	if _, ok, err := s.KubeSandbox(id); ok {
		return kubeFiles{s, id, ctx}, int64(runner.DefaultWorkspaceSize), func() {}, err
	}
	sb, done, err := s.open(ctx, id)
	if err != nil {
		return nil, 0, nil, err
	}
	return sb, sb.Info().WorkspaceBytes, done, nil
}

type kubeFiles struct {
	s   *Service
	id  string
	ctx context.Context // IsDir's
}

func (k kubeFiles) Upload(ctx context.Context, p string, r io.Reader, limit int64) (runner.Transfer, error) {
	return k.s.UploadKube(ctx, k.id, p, r, limit)
}

func (k kubeFiles) Download(ctx context.Context, p string, w io.Writer) (runner.Transfer, error) {
	return k.s.DownloadKube(ctx, k.id, p, w)
}

func (k kubeFiles) UploadTree(ctx context.Context, dir string, r io.Reader, each func(runner.Transfer)) (runner.TreeSummary, error) {
	return k.s.UploadTreeKube(ctx, k.id, dir, r, each)
}

func (k kubeFiles) DownloadTree(ctx context.Context, dir string, sink runner.TreeSink, dotfiles bool, each func(runner.Transfer)) (runner.TreeSummary, error) {
	return k.s.DownloadTreeKube(ctx, k.id, dir, sink, dotfiles, each)
}

func (k kubeFiles) DownloadFiles(ctx context.Context, paths []string, sink runner.TreeSink, each func(runner.Transfer)) (runner.TreeSummary, error) {
	return k.s.DownloadFilesKube(ctx, k.id, paths, sink, each)
}

func (k kubeFiles) IsDir(p string) (bool, error) { return k.s.KubeIsDir(k.ctx, k.id, p) }
