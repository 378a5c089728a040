package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/runner"
)

// exitRefused is a transfer the rules refused (EX_DATAERR): a path out of
// the areas, a symlink, a FIFO, a type off the allowlist, a file too big.
const exitRefused = 65

func newCpCmd(g *globals) *cobra.Command {
	var asJSON, dotfiles bool
	cmd := &cobra.Command{
		Use:   "cp [flags] SRC DST",
		Short: "Copy a file or a directory into or out of a live sandbox",
		Long: `Copy a file or a directory tree between this machine and a live sandbox;
exactly one of SRC and DST is ID:PATH (docker's convention).

Upload (host → sandbox) writes only into the workspace /home/user or /tmp,
within their caps, and never follows a symlink: not on this machine, and
not one the program planted in the sandbox. '..' and paths outside those
areas are refused. Download (sandbox → host) reads from the workspace,
/tmp or the output directory through the artifact scanner: links, FIFOs,
devices and directories are refused, sizes are checked before reading, and
the type, detected from the content, must be on the sandbox's
--download-types allowlist. The host file is created new (never
overwriting, never through a symlink another user could plant; missing
directories are made), and named only once it passed; DST may be an
existing directory.

Directories: SRC_DIR is copied to DST when DST does not exist, and into
DST/<name of SRC_DIR> when DST is a directory; SRC_DIR/. copies the
directory's contents into DST. Every entry keeps the rules of one file:
only regular files and directories go (symlinks, hardlinks in the sandbox,
FIFOs, devices and sockets are reported and skipped, never followed), the
count of entries (100,000) and the bytes (the workspace's size) are capped,
and on the way out every file passes the scanner and is created new on
this machine; paths with a component starting with '.' are refused unless
--dotfiles is given. One decision is printed per entry (accepted ones
with their size), then a summary.

A refused transfer, or a tree with any refused entry, exits 65 and names
the reason words (invalid_path, not_found, symlink, hardlink, not_regular,
is_directory, too_large, too_many, type_not_allowed, hidden_name, exists,
no_space, …); --json prints the decision as one JSON object: for a file,
the transfer record with its size, sha256 and type, or the refusal with
its reason; for a tree, {"transfers": [one record per entry],
"summary": {"files", "dirs", "refused", "bytes"}}.

A sandbox on Kubernetes (sandbox create --engine kube) moves each file
through one exec of its image's sh and cat: under /home/user or /tmp,
symlinks and non-regular files refused inside the sandbox, and a
download's content checked here by the same scanner before it reaches
the host file. A tree goes the same way, entry by entry under the same
rules and caps (one exec to list it, one per directory and file), so a
tree of many files is slow there.`,
		Example: `  airlock cp data.csv sb-0804d69789f28334e665:/home/user/data.csv
  airlock cp sb-0804d69789f28334e665:/home/user/out/result.csv ./result.csv
  airlock cp --json sb-0804d69789f28334e665:/tmp/report.json . | jq .sha256
  airlock cp ./project sb-0804d69789f28334e665:/home/user/project
  airlock cp sb-0804d69789f28334e665:/home/user/project/. ./results
  airlock cp --json ./data/. sb-0804d69789f28334e665:/tmp/data | jq .summary`,
		Args: exactArgs(2, "give SRC and DST, exactly one of them ID:PATH"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCp(cmd, g, args[0], args[1], cpFlags{json: asJSON, dotfiles: dotfiles})
		},
	}
	cmd.Flags().BoolVar(&dotfiles, "dotfiles", false, "copying a directory out, deliver paths with a component starting with '.' (.git, .env)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the decision as one JSON object (for a tree: every entry's and a summary)")
	return cmd
}

// remote splits ID:PATH; a path with a '/' before any ':' is local.
func remote(s string) (id, p string, ok bool) {
	i := strings.IndexByte(s, ':')
	if i <= 0 || strings.Contains(s[:i], "/") {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

// cpFlags are airlock cp's options.
type cpFlags struct{ json, dotfiles bool }

func runCp(cmd *cobra.Command, g *globals, src, dst string, fl cpFlags) error {
	sid, spath, sok := remote(src)
	did, dpath, dok := remote(dst)
	if sok == dok {
		return usageError{errors.New("exactly one of SRC and DST must be ID:PATH, for example `airlock cp file.txt sb-…:/home/user/file.txt`")}
	}
	id := sid
	if dok {
		id = did
	}
	if err := runner.CheckSandboxID(id); err != nil {
		return err
	}
	if _, kube, err := g.service("").KubeSandbox(id); kube {
		if err != nil {
			return err
		}
		return cpKube(cmd, g, id, src, dst, spath, dpath, dok, fl)
	}
	r, done, err := g.sandboxRunner(id)
	if err != nil {
		return err
	}
	defer done()
	sb, err := r.Open(cmd.Context(), id)
	if err != nil {
		return err
	}
	tree, err := isTree(sb, src, spath, dok)
	if err != nil {
		return err
	}
	if tree {
		ctx := cmd.Context()
		return copyTree(cmd, fl, func(each func(runner.Transfer)) (runner.TreeSummary, error) {
			if dok {
				return uploadTree(ctx, g.root, src, dpath, sb.IsDir, sb.Info().WorkspaceBytes, func(p string, r io.Reader) (runner.TreeSummary, error) {
					return sb.UploadTree(ctx, p, r, each)
				}, each)
			}
			return downloadTree(spath, dst, func(p string, sink runner.TreeSink) (runner.TreeSummary, error) {
				return sb.DownloadTree(ctx, p, sink, fl.dotfiles, each)
			})
		})
	}
	var tr runner.Transfer
	if dok {
		tr, err = upload(cmd, sb, src, dpath)
	} else {
		tr, err = download(cmd, sb, spath, dst)
	}
	return reportTransfer(cmd, tr, err, fl)
}

// reportTransfer prints a one-file transfer's decision and turns a
// refusal into exit 65.
func reportTransfer(cmd *cobra.Command, tr runner.Transfer, err error, fl cpFlags) error {
	var te *runner.TransferError
	refused := errors.As(err, &te)
	if fl.json && (err == nil || refused) {
		if werr := writeJSON(cmd.OutOrStdout(), tr); werr != nil {
			return werr
		}
	}
	if refused {
		sayf(cmd.ErrOrStderr(), "%v", err)
		return &exitErr{code: exitRefused}
	}
	return err
}

// isTree says whether SRC is a directory: on this machine, by lstat (a
// symlink is not one, and its upload is refused as a file's), or in the
// sandbox.
func isTree(sb *runner.Sandbox, host, p string, up bool) (bool, error) {
	if up {
		fi, err := os.Lstat(host)
		return err == nil && fi.IsDir(), nil
	}
	p, whole := contents(p)
	if whole {
		return true, nil
	}
	isDir, err := sb.IsDir(p)
	var te *runner.TransferError
	if errors.As(err, &te) {
		return false, nil // the one-file download says why
	}
	return isDir, err
}

// contents reports whether a source directory names its contents (docker's
// trailing "/.", or a path that is "." or "/" itself) and returns it
// without the "/.".
func contents(p string) (string, bool) {
	if len(p) > 1 {
		p = strings.TrimRight(p, "/")
		if p == "" {
			p = "/"
		}
	}
	switch {
	case strings.HasSuffix(p, "/."):
		return strings.TrimSuffix(p, "/."), true
	case p == "." || p == "/":
		return p, true
	}
	return p, false
}

// copyTree runs a tree copy and reports one decision per entry and a
// summary; any refused entry exits 65.
func copyTree(cmd *cobra.Command, fl cpFlags, copyIt func(each func(runner.Transfer)) (runner.TreeSummary, error)) error {
	out := cmd.OutOrStdout()
	var mu sync.Mutex
	rep := runner.TreeReport{Transfers: []runner.Transfer{}}
	refused := 0
	each := func(tr runner.Transfer) {
		mu.Lock()
		defer mu.Unlock()
		if tr.Decision == runner.DecisionRefused {
			refused++
		}
		if fl.json {
			rep.Transfers = append(rep.Transfers, tr)
			return
		}
		if tr.Decision == runner.DecisionAccepted {
			fmt.Fprintf(out, "accepted  %s  %d bytes\n", tr.Path, tr.Size)
		} else {
			fmt.Fprintf(out, "refused   %s  %s: %s\n", tr.Path, tr.Reason, tr.Detail)
		}
	}
	var err error
	rep.Summary, err = copyIt(each)
	var te *runner.TransferError
	stopped := errors.As(err, &te)
	if err != nil && !stopped {
		return err
	}
	rep.Summary.Refused = refused
	if fl.json {
		if werr := writeJSON(out, rep); werr != nil {
			return werr
		}
	} else {
		s := rep.Summary
		fmt.Fprintf(out, "%d files, %d directories, %d bytes copied; %d refused\n", s.Files, s.Dirs, s.Bytes, s.Refused)
	}
	if stopped {
		sayf(cmd.ErrOrStderr(), "%v", err)
		return &exitErr{code: exitRefused}
	}
	if refused > 0 {
		fmt.Fprintf(cmd.ErrOrStderr(), "airlock: %d of the tree's entries were refused\n", refused)
		return &exitErr{code: exitRefused}
	}
	return nil
}

// uploadTree sends the host directory host to the sandbox directory p:
// into p/<name of host> when p is a directory (isDir), as p otherwise.
// put writes the tar stream of the tree (files up to maxFile bytes);
// nothing of airlock's root goes in it.
func uploadTree(ctx context.Context, root, host, p string, isDir func(string) (bool, error), maxFile int64,
	put func(p string, r io.Reader) (runner.TreeSummary, error), each func(runner.Transfer)) (runner.TreeSummary, error) {
	host, whole := contents(host)
	p, _ = contents(p)
	if !whole {
		isDir, err := isDir(p)
		var te *runner.TransferError
		if err != nil && !errors.As(err, &te) {
			return runner.TreeSummary{}, err
		}
		if isDir {
			p = path.Join(p, filepath.Base(host))
		}
	}
	pr, pw := io.Pipe()
	hostErr := make(chan error, 1)
	go func() {
		err := runner.TarHostTree(ctx, host, pw, p, maxFile, each, runner.AirlockRoot(root))
		pw.CloseWithError(err)
		hostErr <- err
	}()
	sum, err := put(p, pr)
	// A stream stopped early: the reader goes, and the writer with it.
	pr.CloseWithError(errUploadStopped)
	if herr := <-hostErr; herr != nil && !errors.Is(herr, errUploadStopped) {
		// This machine's side broke the stream: its error says why.
		return sum, herr
	}
	return sum, err
}

// errUploadStopped ends the reading of a host tree the sandbox's side
// stopped taking.
var errUploadStopped = errors.New("the upload stopped")

// downloadTree delivers the sandbox directory p to the host directory
// host: into host/<name of p> when host is a directory, as host
// otherwise. get passes the tree into the sink.
func downloadTree(p, host string, get func(p string, sink runner.TreeSink) (runner.TreeSummary, error)) (runner.TreeSummary, error) {
	p, whole := contents(p)
	if fi, err := os.Stat(host); err == nil && fi.IsDir() && !whole {
		host = filepath.Join(host, path.Base(p))
	}
	dest, err := artifacts.OpenDest(host)
	if err != nil {
		return runner.TreeSummary{}, fmt.Errorf("%w: opening %s: %v", errdefs.ErrInvalidArgument, host, err)
	}
	defer dest.Close()
	return get(p, runner.DestSink(dest))
}

func upload(cmd *cobra.Command, sb *runner.Sandbox, host, p string) (runner.Transfer, error) {
	f, p, size, err := openUpload(host, p)
	if err != nil {
		return uploadRefusal(host, p, err)
	}
	defer f.Close()
	return sb.Upload(cmd.Context(), p, f, size)
}

// uploadRefusal is openUpload's error as the record of a refused upload
// of host to sandbox path p when it is a refusal (a symlink, not a
// regular file), else as it is.
func uploadRefusal(host, p string, err error) (runner.Transfer, error) {
	var te *runner.TransferError
	if !errors.As(err, &te) {
		return runner.Transfer{}, err
	}
	if strings.HasSuffix(p, "/") {
		p += filepath.Base(host)
	}
	return hostRefusal(runner.DirectionUpload, p, te.Reason, "%s", te.Detail)
}

// openUpload opens host, a regular file never reached through a symlink,
// and returns the sandbox path (p, or in p when p ends in '/') and the
// cap: one byte more than the file, so that a file growing while read is
// refused rather than cut.
func openUpload(host, p string) (*os.File, string, int64, error) {
	f, err := os.OpenFile(host, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, "", 0, &runner.TransferError{Reason: artifacts.ReasonSymlink, Detail: fmt.Sprintf("%s is a symlink; airlock never follows one: name its target", host), Err: errdefs.ErrInvalidArgument}
		}
		return nil, "", 0, fmt.Errorf("%w: opening %s: %v", errdefs.ErrNotFound, host, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, "", 0, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, "", 0, &runner.TransferError{Reason: artifacts.ReasonNotRegular, Detail: fmt.Sprintf("%s is not a regular file (%s); airlock cp copies one file", host, fi.Mode().Type()), Err: errdefs.ErrInvalidArgument}
	}
	if strings.HasSuffix(p, "/") {
		p += filepath.Base(host)
	}
	return f, p, fi.Size() + 1, nil
}

func download(cmd *cobra.Command, sb *runner.Sandbox, p, host string) (runner.Transfer, error) {
	return downloadTo(host, p, func(w io.Writer) (runner.Transfer, error) { return sb.Download(cmd.Context(), p, w) })
}

// downloadTo delivers sandbox path p to host: a new file there, or in it
// when it is a directory. The file is delivered as the scanner delivers
// artifacts: its directory is reached under safeopen's rules (no symlink
// or directory another user could plant; missing directories made), the
// bytes go to a temporary name there, and the file is named only once
// fetch has succeeded, never over an existing one. A refusal so leaves
// nothing, and removes nothing by name.
func downloadTo(host, p string, fetch func(io.Writer) (runner.Transfer, error)) (runner.Transfer, error) {
	dir, name := filepath.Dir(host), filepath.Base(host)
	if fi, err := os.Lstat(host); err == nil && fi.IsDir() {
		dir, name = host, path.Base(p)
	}
	target := filepath.Join(dir, name)
	if name == "/" || name == "." || name == ".." {
		return hostRefusal(runner.DirectionDownload, p, artifacts.ReasonBadName, "%s names no file: give DST a file name", host)
	}
	if fi, err := os.Lstat(target); err == nil {
		if fi.Mode()&fs.ModeSymlink != 0 {
			return hostRefusal(runner.DirectionDownload, p, artifacts.ReasonSymlink, "%s is a symlink, which airlock cp never writes through: remove it or name another file", target)
		}
		return hostRefusal(runner.DirectionDownload, p, artifacts.ReasonExists, "%s exists; airlock cp never overwrites: remove it or name another file", target)
	}
	dest, err := artifacts.OpenDest(dir)
	if err != nil {
		return runner.Transfer{}, fmt.Errorf("%w: opening %s: %v", errdefs.ErrInvalidArgument, dir, err)
	}
	defer dest.Close()
	f, err := dest.Create(name)
	if err != nil {
		return runner.Transfer{}, fmt.Errorf("%w: creating %s: %v", errdefs.ErrUnavailable, target, err)
	}
	tr, err := fetch(f)
	if err != nil {
		f.Discard()
		return tr, err
	}
	if err := f.Commit(); errors.Is(err, artifacts.ErrExists) {
		return hostRefusal(runner.DirectionDownload, p, artifacts.ReasonExists, "%s was made while the file was read; airlock cp never overwrites: remove it or name another file", target)
	} else if err != nil {
		return runner.Transfer{}, fmt.Errorf("%w: writing %s: %v", errdefs.ErrUnavailable, target, err)
	}
	return tr, nil
}

// hostRefusal refuses a one-file transfer of sandbox path p for what it
// met on this machine, as the sandbox's side refuses: a record and a
// *runner.TransferError, so that it exits 65 and --json prints it.
func hostRefusal(direction, p string, reason artifacts.Reason, format string, args ...any) (runner.Transfer, error) {
	detail := artifacts.Escape(fmt.Sprintf(format, args...))
	tr := runner.Transfer{Direction: direction, Path: p, Decision: runner.DecisionRefused, Reason: reason, Detail: detail}
	return tr, &runner.TransferError{Direction: direction, Path: p, Reason: reason, Detail: detail, Err: errdefs.ErrInvalidArgument}
}

// cpKube copies a file or a tree into or out of a sandbox on a cluster,
// through its pod's exec (service.UploadKube, DownloadKube and their
// trees).
func cpKube(cmd *cobra.Command, g *globals, id, src, dst, spath, dpath string, up bool, fl cpFlags) error {
	svc := g.service("")
	ctx := cmd.Context()
	isDir := func(p string) (bool, error) { return svc.KubeIsDir(ctx, id, p) }
	tree := false
	if up {
		fi, err := os.Lstat(src)
		tree = err == nil && fi.IsDir()
	} else if p, whole := contents(spath); whole {
		tree = true
	} else if d, err := isDir(p); err == nil {
		tree = d
	} else if !runner.IsRefusal(err) {
		return err
	}
	if tree {
		return copyTree(cmd, fl, func(each func(runner.Transfer)) (runner.TreeSummary, error) {
			if up {
				return uploadTree(ctx, g.root, src, dpath, isDir, int64(runner.DefaultWorkspaceSize), func(p string, r io.Reader) (runner.TreeSummary, error) {
					return svc.UploadTreeKube(ctx, id, p, r, each)
				}, each)
			}
			return downloadTree(spath, dst, func(p string, sink runner.TreeSink) (runner.TreeSummary, error) {
				return svc.DownloadTreeKube(ctx, id, p, sink, fl.dotfiles, each)
			})
		})
	}
	var tr runner.Transfer
	var err error
	if up {
		var f *os.File
		var size int64
		if f, dpath, size, err = openUpload(src, dpath); err != nil {
			tr, err = uploadRefusal(src, dpath, err)
			return reportTransfer(cmd, tr, err, fl)
		}
		defer f.Close()
		tr, err = svc.UploadKube(ctx, id, dpath, f, size)
	} else {
		tr, err = downloadTo(dst, spath, func(w io.Writer) (runner.Transfer, error) { return svc.DownloadKube(ctx, id, spath, w) })
	}
	return reportTransfer(cmd, tr, err, fl)
}
