package service

// Directory trees in and out of a sandbox on a cluster. There is no
// host-side area to walk, so a tree is its entries, each moved by the
// one-file transfers (kube_transfer_linux.go) under the rules of the
// local tree transfer (runner/tree_linux.go): the same caps on entries,
// bytes and nesting, the same refusals, one record per entry.
//
//   - An upload reads a tar stream (runner.TarHostTree's, or a client's)
//     and judges each entry on its header before anything of it is sent:
//     directories are made with one exec each, files written with one
//     exec each; links, devices and FIFOs are refused and never made.
//   - A download lists the tree with one exec of the image's sh, then
//     fetches each file through the scanner's one-file check. The
//     listing is the sandbox's word, so it is judged as any entry is:
//     paths below the directory asked, names the scanner delivers,
//     bounded in size, count and depth.
//
// Every entry costs a pod exec: trees of thousands of files are slow
// here, not refused.

import (
	"archive/tar"
	"bytes"
	"context"
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
)

const (
	// listScript prints every entry beneath "$1", parents before their
	// children, each as a kind byte (d, f, l for a symlink, o for
	// anything else) and its path, ended by NUL. Symlinks are never
	// followed, on the way to "$1" neither.
	listScript = noLinks + `walk() {
  for e in "$1"/* "$1"/.[!.]* "$1"/..?*; do
    if [ -L "$e" ]; then printf 'l%s\0' "$e"
    elif [ -d "$e" ]; then printf 'd%s\0' "$e"; walk "$e"
    elif [ -f "$e" ]; then printf 'f%s\0' "$e"
    elif [ -e "$e" ]; then printf 'o%s\0' "$e"
    fi
  done
}
[ -e "$1" ] || exit 66; [ -d "$1" ] || exit 65; walk "$1"`
	// isDirScript exits 0 for a directory that is not a symlink, nor
	// reached through one; not 0 otherwise.
	isDirScript = noLinks + `[ -d "$1" ]`
	// mkdirScript makes the directory "$1", whose parent exists: a
	// directory already there is kept, anything else refused. With a
	// second argument, its parents are made too.
	mkdirScript = noLinks + `[ -d "$1" ] && exit 0; [ -e "$1" ] && exit 65; if [ -n "$2" ]; then mkdir -p -- "$1"; else [ -d "${1%/*}" ] || exit 66; mkdir -- "$1"; fi`
)

// kubeTreeDir checks the sandbox directory of a tree transfer, as a
// file's path is checked (kubePath), or the workspace or /tmp itself, and
// returns it absolute.
func kubeTreeDir(dir, p string) (string, error) {
	if p == runner.WorkspaceDir || p == "/tmp" {
		return p, nil
	}
	return kubePath(dir, p)
}

// kubeTreeLimits are a cluster sandbox's tree caps: a local sandbox's
// with the default workspace.
func kubeTreeLimits() runner.TreeLimits {
	return runner.SessionTree(int64(runner.DefaultWorkspaceSize))
}

// KubeIsDir says whether p is a directory (not a symlink to one) in
// sandbox id on its cluster.
func (s *Service) KubeIsDir(ctx context.Context, id, p string) (bool, error) {
	p, err := kubeTreeDir(runner.DirectionDownload, p)
	if err != nil {
		return false, err
	}
	code, err := s.claims().Exec(ctx, id, cluster.Exec{Argv: []string{"sh", "-c", isDirScript, "airlock-cp", p}})
	return err == nil && code == 0, err
}

// UploadTreeKube writes the tar stream r beneath the directory dir of
// sandbox id on its cluster, making dir and its parents where missing,
// and gives each entry's record to each. The error is set when the whole
// transfer failed or a cap stopped it (a *runner.TransferError).
//
// Each record goes to the audit log of the service's root too, as a
// local sandbox's do; a record that cannot be written fails the transfer.
func (s *Service) UploadTreeKube(ctx context.Context, id, dir string, r io.Reader, each func(runner.Transfer)) (runner.TreeSummary, error) {
	a := runner.NewTransferAudit(s.root, id, each)
	sum, err := s.uploadTreeKube(ctx, id, dir, r, a.Record)
	return sum, a.Done(err)
}

// uploadTreeKube is UploadTreeKube, unrecorded.
func (s *Service) uploadTreeKube(ctx context.Context, id, dir string, r io.Reader, each func(runner.Transfer)) (runner.TreeSummary, error) {
	var sum runner.TreeSummary
	top := runner.Transfer{Direction: runner.DirectionUpload, Path: dir}
	dir, err := kubeTreeDir(top.Direction, dir)
	if err != nil {
		return sum, err
	}
	if err := s.kubeMkdir(ctx, id, dir, true); err != nil {
		runner.RecordTreeEntry(&sum, nil, top, err)
		return sum, err
	}
	lim := kubeTreeLimits()
	ts := runner.NewTreeStream(ctx, r, dir, lim)
	// made holds the directories beneath dir known to exist, so that a
	// file's missing parents are made once, as a local upload makes them.
	made := map[string]bool{"": true}
	for {
		hdr, comps, t, err := ts.Next(ctx, &sum, each)
		if err == io.EOF {
			return sum, nil
		}
		if err != nil {
			return sum, err
		}
		full := strings.TrimSuffix(dir, "/") + "/" + strings.Join(comps, "/")
		parent := path.Join(comps[:len(comps)-1]...)
		if hdr.Typeflag == tar.TypeDir {
			if err := s.kubeMkdir(ctx, id, full, !made[parent]); err != nil {
				if !runner.IsRefusal(err) {
					return sum, err
				}
				runner.RecordTreeEntry(&sum, each, t, err)
				continue
			}
			made[path.Join(comps...)] = true
			sum.Dirs++
			continue
		}
		if !made[parent] {
			if err := s.kubeMkdir(ctx, id, path.Dir(full), true); err != nil {
				if !runner.IsRefusal(err) {
					return sum, err
				}
				runner.RecordTreeEntry(&sum, each, t, err)
				continue
			}
			for d := parent; d != "."; d = path.Dir(d) {
				made[d] = true
			}
		}
		body := &errReader{r: ts}
		got, err := s.uploadKube(ctx, id, full, body, hdr.Size, false)
		if body.err != nil {
			// The stream broke inside the entry: what reached the
			// sandbox of it is cut, and the transfer ends.
			if serr := ts.BodyError(ctx, body.err, t, &sum, each); serr != nil {
				return sum, serr
			}
			return sum, body.err
		}
		if err != nil && !runner.IsRefusal(err) {
			return sum, err
		}
		if err == nil {
			t.Size, t.SHA256 = got.Size, got.SHA256
			sum.Files++
			sum.Bytes += got.Size
		}
		runner.RecordTreeEntry(&sum, each, t, err)
	}
}

// errReader keeps the first error of r other than io.EOF.
type errReader struct {
	r   io.Reader
	err error
}

func (e *errReader) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

// kubeMkdir makes the directory p in sandbox id, and its parents with
// parents set.
func (s *Service) kubeMkdir(ctx context.Context, id, p string, parents bool) error {
	argv := []string{"sh", "-c", mkdirScript, "airlock-cp", p}
	if parents {
		argv = append(argv, "-p")
	}
	stderr := capbuf.New(execStderrCap)
	code, err := s.claims().Exec(ctx, id, cluster.Exec{Argv: argv, Stderr: stderr})
	if err != nil {
		return err
	}
	if rerr := scriptRefusal(runner.DirectionUpload, p, code); rerr != nil {
		return rerr
	}
	if code != 0 {
		return fmt.Errorf("%w: making directory %q in sandbox %q: mkdir exited %d: %s", errdefs.ErrUnavailable, p, id, code, strings.TrimSpace(stderr.String()))
	}
	return nil
}

// kubeEntry is one entry of a tree's listing.
type kubeEntry struct {
	kind  byte
	rel   string
	comps []string
	err   error // refused as named
}

// maxListing bounds a tree's listing as this machine holds it: 32 MiB,
// 100,000 entries of 335 bytes. A longer one stops the download as too
// many entries do.
const maxListing = 32 << 20

// parseListing reads listScript's output for dir: at most max records;
// more is a too_many stop. Each record must name a path below dir; one
// whose name the scanner would refuse keeps that refusal.
func parseListing(out []byte, dir string, max int) ([]kubeEntry, bool, error) {
	var list []kubeEntry
	prefix := strings.TrimSuffix(dir, "/") + "/"
	for len(out) > 0 {
		rec, rest, ok := bytes.Cut(out, []byte{0})
		if !ok {
			return nil, false, fmt.Errorf("%w: the sandbox's listing of %q ends inside a record", errdefs.ErrDataLoss, dir)
		}
		out = rest
		if len(list) == max {
			return list, true, nil
		}
		if len(rec) < 2 || !strings.HasPrefix(string(rec[1:]), prefix) || !strings.ContainsRune("dflo", rune(rec[0])) {
			return nil, false, fmt.Errorf("%w: the sandbox's listing of %q holds a record %q that names nothing below it", errdefs.ErrDataLoss, dir, artifacts.Escape(string(rec)))
		}
		rel := string(rec[1+len(prefix):])
		comps, err := runner.TreeEntryPath(rel)
		if err == nil && len(comps) == 0 {
			err = runner.Refusal(runner.ReasonInvalidPath, "the entry names nothing below %s", dir)
		}
		if err == nil {
			rel = strings.Join(comps, "/") // the name the host writes, as judged
		}
		list = append(list, kubeEntry{kind: rec[0], rel: rel, comps: comps, err: err})
	}
	return list, false, nil
}

// DownloadTreeKube passes the tree at the directory dir of sandbox id on
// its cluster through the artifact scanner's one-file check into sink,
// as runner's DownloadTree does for a local sandbox: dot-named entries
// are refused unless dotfiles is set.
//
// Each record goes to the audit log of the service's root too, as a
// local sandbox's do; a record that cannot be written fails the transfer.
func (s *Service) DownloadTreeKube(ctx context.Context, id, dir string, sink runner.TreeSink, dotfiles bool, each func(runner.Transfer)) (runner.TreeSummary, error) {
	a := runner.NewTransferAudit(s.root, id, each)
	sum, err := s.downloadTreeKube(ctx, id, dir, sink, dotfiles, a.Record)
	return sum, a.Done(err)
}

// downloadTreeKube is DownloadTreeKube, unrecorded.
func (s *Service) downloadTreeKube(ctx context.Context, id, dir string, sink runner.TreeSink, dotfiles bool, each func(runner.Transfer)) (runner.TreeSummary, error) {
	var sum runner.TreeSummary
	top := runner.Transfer{Direction: runner.DirectionDownload, Path: dir}
	dir, err := kubeTreeDir(top.Direction, dir)
	if err != nil {
		return sum, err
	}
	if !dotfiles {
		// The tree's own directory, as its entries' names are.
		if err := kubeHidden(dir); err != nil {
			runner.RecordTreeEntry(&sum, each, top, err)
			return sum, err
		}
	}
	lim := kubeTreeLimits()
	listCtx, stopList := context.WithCancel(ctx)
	defer stopList()
	var out bytes.Buffer
	stderr := capbuf.New(execStderrCap)
	capped := &capWriter{w: &out, left: maxListing, stop: stopList}
	code, err := s.claims().Exec(listCtx, id, cluster.Exec{Argv: []string{"sh", "-c", listScript, "airlock-cp", dir}, Stdout: capped, Stderr: stderr})
	if err := ctx.Err(); err != nil {
		return sum, err
	}
	if err != nil && !capped.full {
		return sum, err
	}
	if !capped.full {
		if rerr := scriptRefusal(top.Direction, dir, code); rerr != nil {
			runner.RecordTreeEntry(&sum, nil, top, rerr)
			return sum, rerr
		}
		if code != 0 {
			return sum, fmt.Errorf("%w: listing %q in sandbox %q: sh exited %d: %s", errdefs.ErrUnavailable, dir, id, code, strings.TrimSpace(stderr.String()))
		}
	}
	listed := out.Bytes()
	if capped.full {
		// Cut short: its last record may be torn.
		listed = listed[:bytes.LastIndexByte(listed, 0)+1]
	}
	list, over, err := parseListing(listed, dir, lim.Files)
	if err != nil {
		return sum, err
	}
	over = over || capped.full
	var skip []string // refused directories: their entries go with them
	// delivered holds the directories beneath dir given to the sink. The
	// walk lists a directory before its entries, so an entry whose
	// directory was not delivered is one the sandbox wrote into the
	// listing, past the judging of that directory (.git/config before
	// .git): it is refused.
	delivered := map[string]bool{"": true}
	var read int64 // what the files gave sink, refused ones included
	for _, e := range list {
		if err := ctx.Err(); err != nil {
			return sum, err
		}
		if read > lim.Bytes {
			stop := runner.Refusal(runner.ReasonTooLarge, "the files read, refused ones included, pass the tree's %d-byte cap; copy it in parts", lim.Bytes)
			runner.RecordTreeEntry(&sum, each, top, stop)
			sum.Stopped = runner.ReasonTooLarge
			return sum, stop
		}
		if under(e.rel, skip) {
			continue
		}
		t := runner.Transfer{Direction: runner.DirectionDownload, Path: runner.TreePath(dir, e.rel)}
		if e.err == nil {
			if parent := strings.Join(e.comps[:len(e.comps)-1], "/"); !delivered[parent] {
				e.err = runner.Refusal(runner.ReasonInvalidPath, "listed before its directory %s was, which the listing's walk never does: the sandbox wrote it", runner.TreePath(dir, parent))
			}
		}
		if e.err != nil {
			runner.RecordTreeEntry(&sum, each, t, e.err)
			skip = append(skip, e.rel)
			continue
		}
		name := e.comps[len(e.comps)-1]
		switch e.kind {
		case 'd':
			why := runner.TreeDirRefusal(name, len(e.comps), dotfiles)
			if why == nil {
				if err := sink.Dir(e.rel); err != nil {
					if !errors.Is(err, artifacts.ErrExists) {
						return sum, err
					}
					why = runner.Refusal(artifacts.ReasonExists, "%v", err)
				}
			}
			if why != nil {
				runner.RecordTreeEntry(&sum, each, t, why)
				skip = append(skip, e.rel)
				continue
			}
			delivered[e.rel] = true
			sum.Dirs++
		case 'f':
			if err := s.kubeTreeFile(ctx, id, dir, e, sink, dotfiles, lim, &sum, &read, each, t); err != nil {
				return sum, err
			}
		case 'l':
			runner.RecordTreeEntry(&sum, each, t, runner.Refusal(runner.ReasonSymlink, "a symlink, which airlock never follows"))
		default:
			runner.RecordTreeEntry(&sum, each, t, runner.Refusal(artifacts.ReasonNotRegular, "not a regular file or a directory"))
		}
	}
	if over {
		stop := runner.Refusal(artifacts.ReasonTooMany, "the tree has more than %d entries, or a listing over %d MiB; copy it in parts", lim.Files, maxListing>>20)
		runner.RecordTreeEntry(&sum, each, top, stop)
		sum.Stopped = artifacts.ReasonTooMany
		return sum, stop
	}
	return sum, nil
}

// kubeTreeFile fetches one listed file into sink; only an error that
// ends the transfer is returned.
func (s *Service) kubeTreeFile(ctx context.Context, id, dir string, e kubeEntry, sink runner.TreeSink, dotfiles bool, lim runner.TreeLimits,
	sum *runner.TreeSummary, read *int64, each func(runner.Transfer), t runner.Transfer) error {
	left := lim.Bytes - *read
	opt := artifacts.FileOptions{MaxBytes: max(1, min(int64(kubeDownloadCap), lim.FileBytes, left)), Types: artifacts.SessionTypes, SourceText: true, AllowDotfiles: dotfiles}
	return runner.DeliverTreeFile(sink, e.rel, t, sum, each, read, func(w io.Writer) (artifacts.Artifact, error) {
		got, err := s.downloadKube(ctx, id, strings.TrimSuffix(dir, "/")+"/"+strings.Join(e.comps, "/"), w, opt)
		return artifacts.Artifact{Size: got.Size, SHA256: got.SHA256, MIME: got.MIME}, err
	})
}

// DownloadFilesKube passes the files at paths of sandbox id on its
// cluster, in order, through the one-file download into sink, named by
// the absolute path without its leading '/' (a relative path is the
// workspace's), as runner.Areas.DownloadFiles does for a local sandbox:
// every path gets one record through each, in order; a refused, missing
// or repeated path is refused and the rest go on; the files' bytes are
// capped at the default workspace's size in all. Each file is one pod
// exec. More than runner.MaxDownloadFiles paths is invalid input.
//
// Each record goes to the audit log of the service's root too, as a
// local sandbox's do; a record that cannot be written fails the transfer.
func (s *Service) DownloadFilesKube(ctx context.Context, id string, paths []string, sink runner.TreeSink, each func(runner.Transfer)) (runner.TreeSummary, error) {
	a := runner.NewTransferAudit(s.root, id, each)
	sum, err := s.downloadFilesKube(ctx, id, paths, sink, a.Record)
	return sum, a.Done(err)
}

// downloadFilesKube is DownloadFilesKube, unrecorded.
func (s *Service) downloadFilesKube(ctx context.Context, id string, paths []string, sink runner.TreeSink, each func(runner.Transfer)) (runner.TreeSummary, error) {
	lim := kubeTreeLimits()
	lim.Files = runner.MaxDownloadFiles
	check := func(_, name string) error {
		full, err := kubePath(runner.DirectionDownload, name)
		if err != nil {
			return err
		}
		// Refused before the sink makes anything of it.
		return kubeHidden(full)
	}
	fetch := func(_, name string, max int64, w io.Writer) (artifacts.Artifact, error) {
		got, err := s.downloadKube(ctx, id, name, w, artifacts.FileOptions{MaxBytes: max, Types: artifacts.SessionTypes, SourceText: true})
		return artifacts.Artifact{Size: got.Size, SHA256: got.SHA256, MIME: got.MIME}, err
	}
	return runner.DownloadNamed(ctx, paths, sink, int64(kubeDownloadCap), lim, each, check, fetch)
}

// under says whether rel lies beneath one of dirs.
func under(rel string, dirs []string) bool {
	for _, d := range dirs {
		if strings.HasPrefix(rel, d+"/") {
			return true
		}
	}
	return false
}

// capWriter writes at most left bytes to w; past that it drops the rest,
// sets full and calls stop once.
type capWriter struct {
	w    io.Writer
	left int64
	full bool
	stop func()
}

func (c *capWriter) Write(p []byte) (int, error) {
	if c.full {
		return len(p), nil
	}
	if int64(len(p)) > c.left {
		c.w.Write(p[:c.left])
		c.full = true
		c.stop()
		return len(p), nil
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}
