package runner

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/artifacts"
)

// File transfer into and out of a live sandbox happens on the host side,
// in its areas (see workspace_linux.go), while the program may be racing
// it. A sandbox path is mapped to (area, components) without touching the
// filesystem: absolute paths outside the areas, "..", ".", empty and
// unprintable components are refused. Then everything is done from the
// area's root fd, one openat2 at a time with transferResolve, so no
// symlink is ever followed (one the program planted, or swapped in
// meanwhile) and no other mount is entered. Each area is a filesystem of
// its own, so a directory fd held here stays inside the area whatever the
// program renames.
//
//   - Upload writes into the workspace or /tmp only. Missing parents are
//     made one at a time (mkdirat, owned by the sandbox's user); the body
//     streams into a temporary file (O_EXCL, the sandbox's user, 0644),
//     capped while streaming and by the filesystem's ENOSPC, then is
//     renamed into place. It may replace a regular file, never a
//     directory; a symlink at the final name is refused, and one swapped
//     in after the check is replaced, not followed.
//   - Download reads from the workspace, /tmp or the output directory,
//     through the artifact scanner's rules (artifacts.CopyFile).

// Reason words of refused transfers, beside the scanner's.
const (
	ReasonInvalidPath = artifacts.Reason("invalid_path")
	ReasonNotFound    = artifacts.Reason("not_found")
	ReasonNoSpace     = artifacts.Reason("no_space")
	ReasonSymlink     = artifacts.ReasonSymlink
	ReasonIsDirectory = artifacts.ReasonIsDirectory
	ReasonTooLarge    = artifacts.ReasonTooLarge
)

// Transfer directions and decisions, as audit records carry them.
const (
	DirectionUpload   = "upload"
	DirectionDownload = "download"
	DecisionAccepted  = "accepted"
	DecisionRefused   = "refused"
)

// maxSandboxPath bounds a sandbox path, like PATH_MAX.
const maxSandboxPath = 4096

// transferResolve is the openat2 policy of every lookup below an area.
const transferResolve = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// Transfer is the record of one transfer, for the audit log: never any of
// the bytes moved.
type Transfer struct {
	Direction string `json:"direction"`
	// Path is the sandbox path as asked.
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
	// MIME is the detected type of a download.
	MIME     string           `json:"mime,omitempty"`
	Decision string           `json:"decision"`
	Reason   artifacts.Reason `json:"reason,omitempty"`
	Detail   string           `json:"detail,omitempty"`
}

// TransferError is a refused transfer. It wraps an errdefs class:
// ErrNotFound or ErrInvalidArgument (no_space included: the sandbox's
// own area is full, which the caller fixes by freeing it).
type TransferError struct {
	Direction, Path string
	Reason          artifacts.Reason
	Detail          string
	Err             error
}

func (e *TransferError) Error() string {
	what := "upload to"
	if e.Direction == DirectionDownload {
		what = "download of"
	}
	msg := fmt.Sprintf("%s %q refused (%s)", what, artifacts.Escape(e.Path), e.Reason)
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

func (e *TransferError) Unwrap() error { return e.Err }

// IsRefusal says whether err refuses one transfer (a *TransferError),
// rather than failing the whole.
func IsRefusal(err error) bool {
	var te *TransferError
	return errors.As(err, &te)
}

// ReasonOf is the reason word of a refused transfer, "" for any other error.
func ReasonOf(err error) artifacts.Reason {
	var te *TransferError
	if errors.As(err, &te) {
		return te.Reason
	}
	return ""
}

func refuse(r artifacts.Reason, format string, args ...any) error {
	var class error = errdefs.ErrInvalidArgument
	if r == ReasonNotFound {
		class = errdefs.ErrNotFound
	}
	return &TransferError{Reason: r, Detail: fmt.Sprintf(format, args...), Err: class}
}

// record completes tr from the outcome of a transfer.
func record(tr Transfer, err error) (Transfer, error) {
	if err == nil {
		tr.Decision = DecisionAccepted
		return tr, nil
	}
	tr.Decision, tr.Size, tr.SHA256, tr.MIME = DecisionRefused, 0, "", ""
	var te *TransferError
	if errors.As(err, &te) {
		te.Direction, te.Path = tr.Direction, tr.Path
		tr.Reason, tr.Detail = te.Reason, te.Detail
	} else {
		tr.Detail = err.Error()
	}
	return tr, err
}

// area is one writable area as transfers see it.
type area struct {
	dir  string // in the sandbox
	host string // the mount point
}

// resolve maps a sandbox path to an area and the components below its
// root; a relative path is the workspace's. It touches nothing.
func (a *Areas) resolve(p string, download bool) (area, []string, error) {
	if p == "" {
		return area{}, nil, refuse(ReasonInvalidPath, "name a file in %s or %s", WorkspaceDir, TmpDir)
	}
	if len(p) > maxSandboxPath {
		return area{}, nil, refuse(ReasonInvalidPath, "the path is longer than %d bytes", maxSandboxPath)
	}
	if !strings.HasPrefix(p, "/") {
		p = WorkspaceDir + "/" + p
	}
	areas := []area{{WorkspaceDir, a.Workspace}, {TmpDir, a.Tmp}}
	if download && a.Out != "" {
		areas = append(areas, area{a.OutDir, a.Out})
	}
	comps := strings.Split(p[1:], "/")
	for _, c := range comps {
		if c == "" || c == "." || c == ".." {
			return area{}, nil, refuse(ReasonInvalidPath, "the path has an empty, \".\" or \"..\" component; give a clean path without them")
		}
	}
	for _, ar := range areas {
		if ar.host == "" {
			continue
		}
		top := strings.Split(ar.dir[1:], "/")
		if len(comps) < len(top) || strings.Join(comps[:len(top)], "/") != strings.Join(top, "/") {
			continue
		}
		rel := comps[len(top):]
		for _, c := range rel {
			if why := artifacts.CheckName(c); why != "" {
				return area{}, nil, refuse(ReasonInvalidPath, "%s", why)
			}
		}
		return ar, rel, nil
	}
	// A sandbox made before /tmp was an area of its own has none.
	var names []string
	for _, ar := range areas {
		if ar.host != "" {
			names = append(names, ar.dir)
		}
	}
	where := strings.Join(names, ", ")
	if n := len(names); n > 1 {
		where = strings.Join(names[:n-1], ", ") + " and " + names[n-1]
	}
	return area{}, nil, refuse(ReasonInvalidPath, "the path is outside the sandbox's writable areas (%s)", where)
}

// openArea opens an area's root, and refuses one that is not mounted:
// below it would be airlock's own disk.
func openArea(ar area) (int, error) {
	fd, err := unix.Open(ar.host, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("%w: opening the sandbox's %s: %v", errdefs.ErrUnavailable, ar.dir, err)
	}
	var stx unix.Statx_t
	if err := unix.Statx(fd, "", unix.AT_EMPTY_PATH, unix.STATX_BASIC_STATS, &stx); err != nil ||
		stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 || stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		unix.Close(fd)
		return -1, fmt.Errorf("%w: the sandbox's %s is not mounted at %q (was the sandbox removed?)", errdefs.ErrUnavailable, ar.dir, ar.host)
	}
	return fd, nil
}

// openDir opens the directory name, one component, in dirfd by
// transferResolve.
func openDir(dirfd int, name string) (int, error) {
	fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: transferResolve,
	})
	if errors.Is(err, unix.ENOTDIR) {
		// O_NOFOLLOW|O_DIRECTORY on a symlink; or one swapped with a
		// directory meanwhile: say symlink unless it is a file.
		var st unix.Stat_t
		if unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT != unix.S_IFREG {
			err = unix.ELOOP
		}
	}
	return fd, err
}

// lookupError names why a directory on the way could not be opened.
func lookupError(err error) error {
	switch {
	case errors.Is(err, unix.ELOOP):
		return refuse(ReasonSymlink, "a directory on the path is a symlink, which airlock never follows")
	case errors.Is(err, unix.ENOENT):
		return refuse(ReasonNotFound, "no such file or directory")
	case errors.Is(err, unix.ENOTDIR):
		return refuse(ReasonInvalidPath, "a component of the path is a file, not a directory")
	case errors.Is(err, unix.EXDEV):
		return refuse(ReasonInvalidPath, "the path crosses into another mount")
	case errors.Is(err, unix.ENAMETOOLONG):
		return refuse(ReasonInvalidPath, "a name is too long")
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT):
		return refuse(ReasonNoSpace, "the area is full (its bytes or its files)")
	}
	return fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
}

// Upload writes r to sandboxPath, in the workspace or /tmp, and returns
// the record; the error, when set, is a *TransferError for a refusal. At
// most limit bytes are taken from r.
func (a *Areas) Upload(ctx context.Context, sandboxPath string, r io.Reader, limit int64) (Transfer, error) {
	tr := Transfer{Direction: DirectionUpload, Path: sandboxPath}
	var err error
	tr.Size, tr.SHA256, err = a.upload(ctx, sandboxPath, r, limit)
	return record(tr, err)
}

func (a *Areas) upload(ctx context.Context, p string, r io.Reader, limit int64) (int64, string, error) {
	if limit <= 0 {
		return 0, "", fmt.Errorf("%w: the upload cap must be positive", errdefs.ErrInvalidArgument)
	}
	ar, rel, err := a.resolve(p, false)
	if err != nil {
		return 0, "", err
	}
	if len(rel) == 0 {
		return 0, "", refuse(ReasonIsDirectory, "%s is a directory; name a file in it", ar.dir)
	}
	dir, err := openArea(ar)
	if err != nil {
		return 0, "", err
	}
	defer func() { unix.Close(dir) }()
	for _, c := range rel[:len(rel)-1] {
		next, err := a.mkdirOpen(dir, c)
		if err != nil {
			return 0, "", err
		}
		unix.Close(dir)
		dir = next
	}
	return a.writeAt(ctx, dir, rel[len(rel)-1], r, limit)
}

// writeAt writes at most limit bytes of r to the file name in dir,
// through a temporary file renamed into place, and returns its size and
// SHA-256.
func (a *Areas) writeAt(ctx context.Context, dir int, name string, r io.Reader, limit int64) (int64, string, error) {
	exists, err := checkTarget(dir, name)
	if err != nil {
		return 0, "", err
	}
	tmp, err := tempName()
	if err != nil {
		return 0, "", err
	}
	n, sum, err := a.writeTemp(ctx, dir, tmp, r, limit)
	if err == nil {
		err = replace(dir, tmp, name, exists)
	}
	if err != nil {
		unix.Unlinkat(dir, tmp, 0)
		return 0, "", err
	}
	return n, sum, nil
}

// mkdirOpen opens the directory c in dir, making it (owned by the
// sandbox's user) when missing.
func (a *Areas) mkdirOpen(dir int, c string) (int, error) {
	fd, err := openDir(dir, c)
	if err == nil || !errors.Is(err, unix.ENOENT) {
		if err != nil {
			return -1, lookupError(err)
		}
		return fd, nil
	}
	if err := unix.Mkdirat(dir, c, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return -1, lookupError(err)
	}
	if fd, err = openDir(dir, c); err != nil {
		return -1, lookupError(err)
	}
	// Whoever made it, it is the sandbox's: chown what is not yet.
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err == nil && st.Uid == 0 {
		if err := unix.Fchown(fd, int(a.UID), int(a.GID)); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
		}
		if err := unix.Fchmod(fd, 0o755); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
		}
	}
	return fd, nil
}

// checkTarget refuses a final name that is anything but a regular file or
// nothing.
func checkTarget(dir int, name string) (exists bool, err error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, lookupError(err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		return true, nil
	case unix.S_IFLNK:
		return true, refuse(ReasonSymlink, "the name is a symlink, which airlock never writes through or replaces; remove it first")
	case unix.S_IFDIR:
		return true, refuse(ReasonIsDirectory, "the name is a directory; name a file")
	}
	return true, refuse(artifacts.ReasonNotRegular, "the name is a device, FIFO or socket; remove it first")
}

func tempName() (string, error) {
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	return ".airlock-upload-" + hex.EncodeToString(b), nil
}

// writeTemp streams r into the new file tmp in dir, owned by the sandbox's
// user, and returns its size and SHA-256.
func (a *Areas) writeTemp(ctx context.Context, dir int, tmp string, r io.Reader, limit int64) (int64, string, error) {
	fd, err := unix.Openat(dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, "", lookupError(err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	defer f.Close()
	if err := unix.Fchown(fd, int(a.UID), int(a.GID)); err != nil {
		return 0, "", fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	if err := unix.Fchmod(fd, 0o644); err != nil {
		return 0, "", fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	h := sha256.New()
	cw := &errWriter{w: f}
	buf := uploadBufs.Get().(*[]byte)
	n, err := io.CopyBuffer(io.MultiWriter(cw, h), io.LimitReader(ctxReader{ctx, r}, limit+1), *buf)
	uploadBufs.Put(buf)
	switch {
	case cw.err != nil:
		if errors.Is(cw.err, unix.ENOSPC) || errors.Is(cw.err, unix.EDQUOT) {
			return 0, "", refuse(ReasonNoSpace, "the area is full: it holds its size cap (--workspace-size or --tmp-size); free space in the sandbox first")
		}
		return 0, "", fmt.Errorf("%w: writing the upload: %v", errdefs.ErrUnavailable, cw.err)
	case err != nil:
		return 0, "", fmt.Errorf("reading the upload: %w", err)
	case n > limit:
		return 0, "", refuse(ReasonTooLarge, "the upload passes its %d-byte cap", limit)
	}
	if err := f.Close(); err != nil {
		return 0, "", fmt.Errorf("%w: writing the upload: %v", errdefs.ErrUnavailable, err)
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

var uploadBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// errWriter keeps the writer's own error apart from the reader's.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	n, err := e.w.Write(p)
	if err != nil {
		e.err = err
	}
	return n, err
}

// replace renames tmp to name in dir. Where name was free, it must still
// be (or have become a regular file); a directory is never replaced, and
// a symlink swapped in after the check is replaced, not followed.
func replace(dir int, tmp, name string, exists bool) error {
	if !exists {
		err := unix.Renameat2(dir, tmp, dir, name, unix.RENAME_NOREPLACE)
		if !errors.Is(err, unix.EEXIST) {
			return renameError(err)
		}
		if _, err := checkTarget(dir, name); err != nil {
			return err
		}
	}
	return renameError(unix.Renameat2(dir, tmp, dir, name, 0))
}

func renameError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EISDIR), errors.Is(err, unix.ENOTEMPTY), errors.Is(err, unix.EEXIST):
		return refuse(ReasonIsDirectory, "the name is a directory; name a file")
	}
	return lookupError(err)
}

// DownloadOptions bound a download.
type DownloadOptions struct {
	// MaxBytes caps the file; it must be positive.
	MaxBytes int64
	// Types is the MIME allowlist; nil means artifacts.DefaultTypes.
	Types []string
	// SourceText lets source-code names (.py, .go, .yaml, …) hold text.
	SourceText bool
	// AllowDotfiles allows a path with a component starting with '.'.
	AllowDotfiles bool
}

// SessionDownload is the default for long-lived sandboxes: the scanner's
// types plus source code as text.
func SessionDownload(maxBytes int64) DownloadOptions {
	return DownloadOptions{MaxBytes: maxBytes, Types: artifacts.SessionTypes, SourceText: true}
}

// Download writes the file at sandboxPath (in the workspace, /tmp or the
// output directory) to w, when the artifact scanner's rules pass it, and
// returns the record. A refusal is a *TransferError and writes nothing to
// w, except ReasonTooLarge for a file that grew past its cap while being
// read: then w holds a truncated copy to discard.
func (a *Areas) Download(ctx context.Context, sandboxPath string, w io.Writer, opt DownloadOptions) (Transfer, error) {
	tr := Transfer{Direction: DirectionDownload, Path: sandboxPath}
	art, err := a.download(ctx, sandboxPath, w, opt)
	tr.Size, tr.SHA256, tr.MIME = art.Size, art.SHA256, art.MIME
	return record(tr, err)
}

func (a *Areas) download(ctx context.Context, p string, w io.Writer, opt DownloadOptions) (artifacts.Artifact, error) {
	var none artifacts.Artifact
	if opt.MaxBytes <= 0 {
		return none, fmt.Errorf("%w: the download cap must be positive", errdefs.ErrInvalidArgument)
	}
	ar, rel, err := a.resolve(p, true)
	if err != nil {
		return none, err
	}
	if len(rel) == 0 {
		return none, refuse(ReasonIsDirectory, "%s is a directory; name a file in it", ar.dir)
	}
	if !opt.AllowDotfiles {
		for _, c := range rel {
			if c[0] == '.' {
				return none, refuse(artifacts.ReasonHiddenName, "%q starts with '.', and tools act on dotfiles by themselves (.git, .ssh, .bashrc)", artifacts.Escape(c))
			}
		}
	}
	dir, err := openArea(ar)
	if err != nil {
		return none, err
	}
	defer func() { unix.Close(dir) }()
	for _, c := range rel[:len(rel)-1] {
		sub, err := openDir(dir, c)
		if err != nil {
			return none, lookupError(err)
		}
		unix.Close(dir)
		dir = sub
	}
	art, rej, err := artifacts.CopyFile(ctx, dir, rel[len(rel)-1], p, w, artifacts.FileOptions{
		MaxBytes: opt.MaxBytes, Types: opt.Types, SourceText: opt.SourceText, AllowDotfiles: opt.AllowDotfiles,
	})
	switch {
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
		return none, lookupError(err)
	case errors.Is(err, artifacts.ErrGrew):
		return none, refuse(ReasonTooLarge, "%v; discard what was received", err)
	case err != nil:
		return none, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	case rej != nil:
		detail := rej.Detail
		if rej.Reason == artifacts.ReasonSymlink {
			detail = "the name is a symlink, which airlock never follows"
		}
		return none, refuse(rej.Reason, "%s", detail)
	}
	return art, nil
}
