package runner

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/artifacts"
)

// Trees move in and out of a live sandbox under the rules of one file
// (transfer_linux.go), entry by entry:
//
//   - UploadTree reads a tar stream and writes it beneath a directory of
//     the workspace or /tmp. Each entry is judged on its header before
//     anything of it is written: an absolute name, a ".." component or a
//     name the scanner would not deliver is invalid_path; a symlink, a
//     hardlink, a device or a FIFO is refused and never made; a file over
//     the file cap is too_large and its bytes are read and dropped. An
//     entry past the count cap, or one whose size would pass what is left
//     of the byte cap, stops the stream there: reading on would cost more
//     than the caps allow. Directories and files are made as one upload
//     makes them (owned by the sandbox's user, never through a symlink,
//     a file replacing only a regular file). Nothing is held in memory
//     but one entry's header and a copy buffer.
//   - DownloadTree walks a directory of the workspace, /tmp or the output
//     directory from its fd and passes every file through the artifact
//     scanner's one-file check (artifacts.CopyFile) into a TreeSink:
//     directories named with a '.' are refused whole unless dotfiles are
//     allowed, nesting is bounded, and the count and byte caps hold. The
//     byte cap counts what every file gave the sink, refused ones too (a
//     file that grew while read is read to its cap, then refused): past
//     it, the walk stops.
//
// Every entry gets one Transfer, given to the caller's function as it is
// decided, so that no list grows with the tree.

// DefaultTreeFiles caps the entries of one tree transfer by default: as
// many as a run's inputs may hold.
const DefaultTreeFiles = maxInputEntries

// maxTreeDepth bounds the nesting of a downloaded tree, as the scanner's.
const maxTreeDepth = 32

// TreeLimits bound one tree transfer. Each must be positive.
type TreeLimits struct {
	// Files caps the entries: files, directories and refused ones alike.
	Files int
	// Bytes caps the files' bytes, those refused and read included.
	Bytes int64
	// FileBytes caps one file.
	FileBytes int64
}

func (l TreeLimits) validate() error {
	if l.Files <= 0 || l.Bytes <= 0 || l.FileBytes <= 0 {
		return fmt.Errorf("%w: a tree transfer's caps must be positive", errdefs.ErrInvalidArgument)
	}
	return nil
}

// SessionTree is the default of long-lived sandboxes: DefaultTreeFiles
// entries, and bytes up to the workspace's size in all and for one file.
func SessionTree(workspaceBytes int64) TreeLimits {
	return TreeLimits{Files: DefaultTreeFiles, Bytes: workspaceBytes, FileBytes: workspaceBytes}
}

// TreeSummary counts the decisions of one tree transfer.
type TreeSummary struct {
	// Files and Dirs are the accepted ones, Refused every refused entry.
	Files   int `json:"files"`
	Dirs    int `json:"dirs"`
	Refused int `json:"refused"`
	// Bytes is the accepted files' bytes.
	Bytes int64 `json:"bytes"`
	// Stopped is the reason word of the cap that stopped the transfer at
	// its last record (too_many, too_large); what came after was not read.
	Stopped artifacts.Reason `json:"stopped,omitempty"`
}

// treeRecord reports tr, completed from err, through each, and counts it.
func treeRecord(sum *TreeSummary, each func(Transfer), tr Transfer, err error) {
	tr, _ = record(tr, err)
	if err != nil {
		sum.Refused++
	}
	if each != nil {
		each(tr)
	}
}

// treePath is a sandbox path for a record: base and rel joined, escaped.
func treePath(base, rel string) string {
	return strings.TrimSuffix(base, "/") + "/" + artifacts.Escape(rel)
}

// UploadTree writes the tar stream r beneath the directory dir, in the
// workspace or /tmp, making it and its parents where missing. Each entry's
// record goes to each. The error is set when the whole transfer failed or
// stopped: a *TransferError (too_many, too_large) when a cap stopped the
// stream at that entry, invalid input for a stream that is not tar.
func (a *Areas) UploadTree(ctx context.Context, dir string, r io.Reader, lim TreeLimits, each func(Transfer)) (TreeSummary, error) {
	var sum TreeSummary
	if err := lim.validate(); err != nil {
		return sum, err
	}
	ar, rel, err := a.resolve(dir, false)
	if err != nil {
		_, err = record(Transfer{Direction: DirectionUpload, Path: dir}, err)
		return sum, err
	}
	root, err := openArea(ar)
	if err != nil {
		return sum, err
	}
	for _, c := range rel {
		next, err := a.mkdirOpen(root, c)
		unix.Close(root)
		if err != nil {
			_, err = record(Transfer{Direction: DirectionUpload, Path: dir}, err)
			return sum, err
		}
		root = next
	}
	ts := NewTreeStream(ctx, r, dir, lim)
	u := &treeUpload{a: a, root: root, fd: -1, base: dir, lim: lim, each: each, sum: &sum, stream: ts}
	defer u.close()
	for {
		hdr, comps, t, err := ts.Next(ctx, &sum, each)
		if err == io.EOF {
			return sum, nil
		}
		if err != nil {
			return sum, err
		}
		if err := u.entry(ctx, hdr, comps, ts, t); err != nil {
			return sum, err
		}
	}
}

// TreeStream reads an uploaded tree's tar stream entry by entry under the
// caps of a TreeLimits: the count of entries, the bytes the entries
// claim, and the stream's own bytes (headers cost bytes too: PAX records,
// long names), each entry's data read from the stream itself.
type TreeStream struct {
	tr      *tar.Reader
	dir     string
	lim     TreeLimits
	entries int
	read    int64
}

// NewTreeStream reads r, an upload to the sandbox directory dir, under
// lim until ctx is done.
func NewTreeStream(ctx context.Context, r io.Reader, dir string, lim TreeLimits) *TreeStream {
	capped := &streamCap{r: ctxReader{ctx, r}, left: lim.Bytes + int64(lim.Files+1)*headerAllowance}
	return &TreeStream{tr: tar.NewReader(capped), dir: dir, lim: lim}
}

// Next returns the next entry to make, a directory or a regular file,
// with its path's components below the directory and its record. Every
// other entry is judged here, recorded in sum and through each, and
// skipped: a name that is absolute, has "..", is too long or would not
// be delivered; a link, device, FIFO or other type; a file over the
// file cap (its bytes are read and dropped). The directory itself is
// skipped unrecorded. io.EOF ends the stream. A cap that stops the
// stream is recorded and returned as a *TransferError; a stream that is
// not tar is invalid input.
func (s *TreeStream) Next(ctx context.Context, sum *TreeSummary, each func(Transfer)) (*tar.Header, []string, Transfer, error) {
	for {
		hdr, err := s.tr.Next()
		if err == io.EOF {
			return nil, nil, Transfer{}, io.EOF
		}
		if err != nil && !(errors.Is(err, tar.ErrInsecurePath) && hdr != nil) {
			return nil, nil, Transfer{}, s.failed(ctx, err, sum, each)
		}
		if hdr.Typeflag == tar.TypeXGlobalHeader {
			continue // metadata for the whole archive (git archive writes one)
		}
		s.entries++
		t := Transfer{Direction: DirectionUpload, Path: treePath(s.dir, hdr.Name)}
		if s.entries > s.lim.Files {
			stop := refuse(artifacts.ReasonTooMany, "the stream has more than %d entries; send the rest in another", s.lim.Files)
			treeRecord(sum, each, t, stop)
			sum.Stopped = artifacts.ReasonTooMany
			return nil, nil, t, stop
		}
		size := dataSize(hdr)
		if size > s.lim.Bytes-s.read {
			stop := refuse(ReasonTooLarge, "the entry claims %d bytes, past what is left (%d) of the stream's %d-byte cap", size, s.lim.Bytes-s.read, s.lim.Bytes)
			treeRecord(sum, each, t, stop)
			sum.Stopped = ReasonTooLarge
			return nil, nil, t, stop
		}
		s.read += size
		comps, refusal := s.judge(hdr, &t)
		if refusal != nil {
			treeRecord(sum, each, t, refusal)
			continue
		}
		if len(comps) == 0 {
			continue // the target itself (a file without a name is refused)
		}
		return hdr, comps, t, nil
	}
}

// judge checks one entry's path and type, setting t's path to the
// entry's as made: no components and no refusal for the directory
// itself.
func (s *TreeStream) judge(hdr *tar.Header, t *Transfer) ([]string, error) {
	comps, err := entryPath(hdr.Name)
	if err != nil {
		return nil, err
	}
	t.Path = treePath(s.dir, strings.Join(comps, "/"))
	if len(t.Path) > maxSandboxPath {
		return nil, refuse(ReasonInvalidPath, "the path is longer than %d bytes", maxSandboxPath)
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		return comps, nil
	case tar.TypeReg:
		if len(comps) == 0 {
			return nil, refuse(ReasonInvalidPath, "the entry names no file")
		}
		if hdr.Size > s.lim.FileBytes {
			return nil, refuse(ReasonTooLarge, "%d bytes, over the %d-byte file cap", hdr.Size, s.lim.FileBytes)
		}
		return comps, nil
	case tar.TypeSymlink:
		return nil, refuse(ReasonSymlink, "a symlink, which airlock never makes in a sandbox")
	case tar.TypeLink:
		return nil, refuse(artifacts.ReasonHardlink, "a hardlink, which airlock never makes in a sandbox")
	case tar.TypeFifo:
		return nil, refuse(artifacts.ReasonNotRegular, "a FIFO; only regular files and directories are copied")
	case tar.TypeChar, tar.TypeBlock:
		return nil, refuse(artifacts.ReasonNotRegular, "a device; only regular files and directories are copied")
	}
	return nil, refuse(artifacts.ReasonNotRegular, "a tar entry of type %q; only regular files and directories are copied", artifacts.Escape(string(hdr.Typeflag)))
}

// Read reads the current entry's data.
func (s *TreeStream) Read(p []byte) (int, error) { return s.tr.Read(p) }

// failed is the error that ends the stream for err, read from it: ctx's,
// the stream cap's stop (recorded), or invalid input.
func (s *TreeStream) failed(ctx context.Context, err error, sum *TreeSummary, each func(Transfer)) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, errStreamCap) {
		return streamStop(sum, each, s.dir, s.lim)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: the tar stream ends inside an entry", errdefs.ErrInvalidArgument)
	}
	return fmt.Errorf("%w: reading the tar stream: %v", errdefs.ErrInvalidArgument, err)
}

// BodyError is the error that ends the stream for err, read from the
// current entry's data (t its record); nil when err is not the stream's
// (one that refuses only the entry).
func (s *TreeStream) BodyError(ctx context.Context, err error, t Transfer, sum *TreeSummary, each func(Transfer)) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: the tar stream ends inside %q", errdefs.ErrInvalidArgument, t.Path)
	case errors.Is(err, errStreamCap):
		return streamStop(sum, each, s.dir, s.lim)
	}
	return nil
}

// headerAllowance is what the headers of one entry may take of a stream
// (a header block, and PAX records for a name up to PATH_MAX).
const headerAllowance = 8 << 10

var errStreamCap = errors.New("the stream passes its cap")

// streamCap reads at most left bytes of r, then errStreamCap.
type streamCap struct {
	r    io.Reader
	left int64
}

func (c *streamCap) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, errStreamCap
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

// streamStop records and returns the stop of a stream past its cap.
func streamStop(sum *TreeSummary, each func(Transfer), dir string, lim TreeLimits) error {
	stop := refuse(ReasonTooLarge, "the stream passes %d bytes (its files' cap plus %d bytes of headers an entry)", lim.Bytes+int64(lim.Files+1)*headerAllowance, headerAllowance)
	treeRecord(sum, each, Transfer{Direction: DirectionUpload, Path: dir}, stop)
	sum.Stopped = ReasonTooLarge
	return stop
}

// dataSize is how many bytes of the stream hdr's entry holds.
func dataSize(hdr *tar.Header) int64 {
	switch hdr.Typeflag {
	case tar.TypeLink, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeDir, tar.TypeFifo:
		return 0
	}
	return hdr.Size
}

// entryPath splits a tar entry's name into components below the target,
// dropping empty and "." ones: refused when absolute, with "..", or with a
// name the scanner would not deliver.
func entryPath(name string) ([]string, error) {
	if strings.HasPrefix(name, "/") {
		return nil, refuse(ReasonInvalidPath, "an absolute name; a tree's entries name paths below its target")
	}
	var comps []string
	for c := range strings.SplitSeq(name, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			return nil, refuse(ReasonInvalidPath, "a \"..\" component; a tree's entries name paths below its target")
		}
		if why := artifacts.CheckName(c); why != "" {
			return nil, refuse(ReasonInvalidPath, "%s", why)
		}
		comps = append(comps, c)
	}
	return comps, nil
}

type treeUpload struct {
	a    *Areas
	root int // the target directory
	// fd is the directory of the last file written (key, depth), kept
	// open for its siblings; -1 when none.
	fd     int
	key    string
	depth  int
	base   string
	lim    TreeLimits
	each   func(Transfer)
	sum    *TreeSummary
	stream *TreeStream
}

func (u *treeUpload) close() {
	if u.fd >= 0 {
		unix.Close(u.fd)
	}
	unix.Close(u.root)
}

// entry makes one entry Next passed (a directory or a file, comps its
// path); only an error that ends the stream is returned.
func (u *treeUpload) entry(ctx context.Context, hdr *tar.Header, comps []string, body io.Reader, t Transfer) error {
	if hdr.Typeflag == tar.TypeDir {
		if _, err := u.dir(comps); err != nil {
			treeRecord(u.sum, u.each, t, err)
			return nil
		}
		u.sum.Dirs++
		return nil
	}
	return u.file(ctx, comps, hdr.Size, body, t)
}

// dir opens the directory comps beneath the target, making what is
// missing; the fd stays the upload's.
func (u *treeUpload) dir(comps []string) (int, error) {
	if len(comps) == 0 {
		return u.root, nil
	}
	key := strings.Join(comps, "/")
	if u.fd >= 0 && key == u.key {
		return u.fd, nil
	}
	start, rest := u.root, comps
	if u.fd >= 0 && strings.HasPrefix(key, u.key+"/") {
		start, rest = u.fd, comps[u.depth:]
	}
	fd := start
	for _, c := range rest {
		next, err := u.a.mkdirOpen(fd, c)
		if fd != start {
			unix.Close(fd)
		}
		if err != nil {
			return -1, err
		}
		fd = next
	}
	if u.fd >= 0 {
		unix.Close(u.fd)
	}
	u.fd, u.key, u.depth = fd, key, len(comps)
	return fd, nil
}

// file writes one regular file of size bytes from body.
func (u *treeUpload) file(ctx context.Context, comps []string, size int64, body io.Reader, t Transfer) error {
	n, sum, err := u.write(ctx, comps, size, body)
	if err != nil && !IsRefusal(err) {
		if serr := u.stream.BodyError(ctx, err, t, u.sum, u.each); serr != nil {
			return serr
		}
		return err
	}
	if err == nil {
		t.Size, t.SHA256 = n, sum
		u.sum.Files++
		u.sum.Bytes += n
	}
	treeRecord(u.sum, u.each, t, err)
	return nil
}

func (u *treeUpload) write(ctx context.Context, comps []string, size int64, body io.Reader) (int64, string, error) {
	dir, err := u.dir(comps[:len(comps)-1])
	if err != nil {
		return 0, "", err
	}
	// A stream that ends inside the entry is io.ErrUnexpectedEOF.
	return u.a.writeAt(ctx, dir, comps[len(comps)-1], body, size)
}

// TreeSink receives a downloaded tree: Dir for every directory, the empty
// ones included, and File for every file before it is checked. An error
// wrapping artifacts.ErrExists refuses that entry (exists); any other ends
// the download.
type TreeSink interface {
	Dir(rel string) error
	File(rel string) (TreeFile, error)
}

// TreeFile is one file of a downloaded tree as it arrives. Commit keeps
// it, with its record; Discard drops what was written.
type TreeFile interface {
	io.Writer
	Commit(tr Transfer) error
	Discard()
}

// DownloadTree passes the tree at the directory dir (in the workspace,
// /tmp or the output directory) through the artifact scanner's one-file
// check into sink, giving each entry's record to each. The error is set
// when the whole transfer failed or stopped: a *TransferError when dir
// is refused or the count cap stopped the walk.
func (a *Areas) DownloadTree(ctx context.Context, dir string, sink TreeSink, opt DownloadOptions, lim TreeLimits, each func(Transfer)) (TreeSummary, error) {
	var sum TreeSummary
	if err := lim.validate(); err != nil {
		return sum, err
	}
	if opt.MaxBytes <= 0 {
		return sum, fmt.Errorf("%w: the download cap must be positive", errdefs.ErrInvalidArgument)
	}
	top := Transfer{Direction: DirectionDownload, Path: dir}
	fd, err := a.openTree(dir, opt)
	if err != nil {
		_, err = record(top, err)
		return sum, err
	}
	defer unix.Close(fd)
	d := &treeDownload{base: dir, sink: sink, opt: opt, lim: lim, each: each, sum: &sum}
	return sum, d.walk(ctx, fd, "", 0)
}

// MaxDownloadFiles caps the paths of one DownloadFiles request.
const MaxDownloadFiles = 1000

// ReasonDuplicate refuses a path that a request of many names twice: each
// file is sent once, at its first name.
const ReasonDuplicate = artifacts.Reason("duplicate")

// DownloadFiles passes each file of paths, in order, through the one-file
// check of Download (the artifact scanner's rules, opt's allowlist and
// cap) into sink, named by its absolute path without the leading '/'.
// Every path gets one record through each, in order: a refused, missing
// or repeated path is refused with its reason and the rest go on. The
// files' bytes are capped at lim.Bytes in all (a file past what is left
// is too_large) and lim.FileBytes each. More than lim.Files paths is
// invalid input, refused before any is read; the error is otherwise set
// only when the whole transfer failed.
func (a *Areas) DownloadFiles(ctx context.Context, paths []string, sink TreeSink, opt DownloadOptions, lim TreeLimits, each func(Transfer)) (TreeSummary, error) {
	if opt.MaxBytes <= 0 {
		return TreeSummary{}, fmt.Errorf("%w: the download cap must be positive", errdefs.ErrInvalidArgument)
	}
	check := func(p, _ string) error {
		_, _, err := a.resolve(p, true)
		return err
	}
	fetch := func(p, _ string, max int64, w io.Writer) (artifacts.Artifact, error) {
		fo := opt
		fo.MaxBytes = max
		art, err := a.download(ctx, p, w, fo)
		if err != nil && !IsRefusal(err) && ctx.Err() != nil {
			return art, ctx.Err()
		}
		return art, err
	}
	return DownloadNamed(ctx, paths, sink, opt.MaxBytes, lim, each, check, fetch)
}

// DownloadNamed is a many-file download wherever the files are read: each
// of paths (a relative one is the workspace's), in order, is judged by
// check (given the path and its absolute name; a refusal is that path's
// record), refused as a duplicate when an earlier path named the same
// file, or fetched by fetch (given both too), which writes at most max bytes of it (the
// least of fileCap, lim.FileBytes and what is left of lim.Bytes), into
// sink as its absolute name without the leading '/'. Every path gets one
// record through each; more than lim.Files paths is invalid input,
// refused before any is read. The bytes the files gave sink, refused
// ones included, count toward lim.Bytes: once past it, every path left is
// refused too_large unread. The error is otherwise set only when the
// whole transfer failed.
func DownloadNamed(ctx context.Context, paths []string, sink TreeSink, fileCap int64, lim TreeLimits, each func(Transfer),
	check func(p, name string) error, fetch func(p, name string, max int64, w io.Writer) (artifacts.Artifact, error)) (TreeSummary, error) {
	var sum TreeSummary
	if err := lim.validate(); err != nil {
		return sum, err
	}
	if len(paths) > lim.Files {
		return sum, fmt.Errorf("%w: %d paths, past the cap of %d a request; read the rest in another", errdefs.ErrInvalidArgument, len(paths), lim.Files)
	}
	seen := make(map[string]int, len(paths))
	var read int64 // what sink was given, refused files included
	for i, p := range paths {
		if err := ctx.Err(); err != nil {
			return sum, err
		}
		t := Transfer{Direction: DirectionDownload, Path: p}
		name := p
		if !strings.HasPrefix(name, "/") {
			name = WorkspaceDir + "/" + name
		}
		if err := check(p, name); err != nil {
			treeRecord(&sum, each, t, err)
			continue
		}
		if first, ok := seen[name]; ok {
			treeRecord(&sum, each, t, refuse(ReasonDuplicate, "names the file that path %d (%q) names; each file is sent once", first, artifacts.Escape(paths[first])))
			continue
		}
		seen[name] = i
		if read > lim.Bytes {
			treeRecord(&sum, each, t, refuse(ReasonTooLarge, "not read: the files read before it, refused ones included, passed the request's %d-byte cap; read it in another", lim.Bytes))
			continue
		}
		left := lim.Bytes - read
		err := DeliverTreeFile(sink, name[1:], t, &sum, each, &read, func(w io.Writer) (artifacts.Artifact, error) {
			art, err := fetch(p, name, max(1, min(fileCap, lim.FileBytes, left)), w)
			var te *TransferError
			if errors.As(err, &te) && te.Reason == ReasonTooLarge && left < min(fileCap, lim.FileBytes) {
				te.Detail += fmt.Sprintf(" (what is left of the request's %d-byte cap)", lim.Bytes)
			}
			return art, err
		})
		if err != nil {
			return sum, err
		}
	}
	return sum, nil
}

// TreeDirRefusal refuses a directory of a downloaded tree, name its last
// component at nesting depth, that is not delivered, its entries with it:
// a name the scanner would not deliver, a dot name unless dotfiles, a
// nesting past the cap. nil: the directory goes.
func TreeDirRefusal(name string, depth int, dotfiles bool) error {
	switch {
	case artifacts.CheckName(name) != "":
		return refuse(artifacts.ReasonBadName, "%s", artifacts.CheckName(name))
	case name[0] == '.' && !dotfiles:
		return refuse(artifacts.ReasonHiddenName, "%q starts with '.', and tools act on dotfiles by themselves (.git, .ssh, .bashrc)", artifacts.Escape(name))
	case depth > maxTreeDepth:
		return refuse(artifacts.ReasonTooMany, "nested deeper than %d directories", maxTreeDepth)
	}
	return nil
}

// DeliverTreeFile passes one file of a downloaded tree into sink as rel,
// whichever side reads it: fetch writes it and returns what it wrote,
// or a refusal (a *TransferError) of this file alone, or any other
// error, which ends the download. The file's record, completed, goes
// through each and is counted in sum; a file the sink already has is
// refused as exists. What fetch wrote is added to *read, whether the
// file is kept or not: a tree's byte cap counts it. Only an error that
// ends the download is returned.
func DeliverTreeFile(sink TreeSink, rel string, t Transfer, sum *TreeSummary, each func(Transfer), read *int64, fetch func(io.Writer) (artifacts.Artifact, error)) error {
	f, err := sink.File(rel)
	if err != nil {
		if errors.Is(err, artifacts.ErrExists) {
			treeRecord(sum, each, t, refuse(artifacts.ReasonExists, "%v", err))
			return nil
		}
		return err
	}
	cw := &artifacts.CountingWriter{W: f}
	art, err := fetch(cw)
	*read += cw.N
	if err != nil {
		f.Discard()
		if !IsRefusal(err) {
			return err
		}
		treeRecord(sum, each, t, err)
		return nil
	}
	t.Size, t.SHA256, t.MIME = art.Size, art.SHA256, art.MIME
	if err := f.Commit(t); err != nil {
		if !errors.Is(err, artifacts.ErrExists) {
			return err
		}
		treeRecord(sum, each, t, refuse(artifacts.ReasonExists, "%v", err))
		return nil
	}
	sum.Files++
	sum.Bytes += art.Size
	treeRecord(sum, each, t, nil)
	return nil
}

// openTree opens the directory p for a download.
func (a *Areas) openTree(p string, opt DownloadOptions) (int, error) {
	ar, rel, err := a.resolve(p, true)
	if err != nil {
		return -1, err
	}
	if !opt.AllowDotfiles {
		for _, c := range rel {
			if c[0] == '.' {
				return -1, refuse(artifacts.ReasonHiddenName, "%q starts with '.', and tools act on dotfiles by themselves (.git, .ssh, .bashrc)", artifacts.Escape(c))
			}
		}
	}
	dir, err := openArea(ar)
	if err != nil {
		return -1, err
	}
	for i, c := range rel {
		sub, err := openDir(dir, c)
		unix.Close(dir)
		if err != nil {
			if errors.Is(err, unix.ENOTDIR) && i == len(rel)-1 {
				return -1, refuse(ReasonInvalidPath, "not a directory; copy one file by naming it")
			}
			return -1, lookupError(err)
		}
		dir = sub
	}
	return dir, nil
}

// IsDir says whether p, in the workspace, /tmp or the output directory,
// is a directory; false when nothing is there. A symlink on the way is a
// refusal, never followed.
func (a *Areas) IsDir(p string) (bool, error) {
	fd, err := a.openTree(p, DownloadOptions{AllowDotfiles: true})
	switch ReasonOf(err) {
	case "":
	case ReasonNotFound:
		return false, nil
	case ReasonInvalidPath:
		if _, _, rerr := a.resolve(p, true); rerr == nil {
			return false, nil // a file
		}
	}
	if err != nil {
		return false, err
	}
	unix.Close(fd)
	return true, nil
}

type treeDownload struct {
	base    string
	sink    TreeSink
	opt     DownloadOptions
	lim     TreeLimits
	each    func(Transfer)
	sum     *TreeSummary
	entries int
	// read is what the files gave the sink, refused ones included.
	read int64
}

func (d *treeDownload) walk(ctx context.Context, dirfd int, rel string, depth int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	names, err := treeNames(dirfd, d.lim.Files-d.entries+1)
	if err != nil {
		return fmt.Errorf("%w: reading %q: %v", errdefs.ErrUnavailable, treePath(d.base, rel), err)
	}
	for _, name := range names {
		relp := path.Join(rel, name)
		t := Transfer{Direction: DirectionDownload, Path: treePath(d.base, relp)}
		d.entries++
		if d.entries > d.lim.Files {
			stop := refuse(artifacts.ReasonTooMany, "the tree has more than %d entries; copy it in parts", d.lim.Files)
			treeRecord(d.sum, d.each, t, stop)
			d.sum.Stopped = artifacts.ReasonTooMany
			return stop
		}
		if d.read > d.lim.Bytes {
			stop := refuse(ReasonTooLarge, "the files read, refused ones included, pass the tree's %d-byte cap; copy it in parts", d.lim.Bytes)
			treeRecord(d.sum, d.each, t, stop)
			d.sum.Stopped = ReasonTooLarge
			return stop
		}
		var st unix.Stat_t
		if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			treeRecord(d.sum, d.each, t, lookupError(err))
			continue
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := d.file(ctx, dirfd, name, relp, t); err != nil {
				return err
			}
			continue
		}
		if err := TreeDirRefusal(name, depth+1, d.opt.AllowDotfiles); err != nil {
			treeRecord(d.sum, d.each, t, err)
			continue
		}
		sub, err := openDir(dirfd, name)
		if err != nil {
			treeRecord(d.sum, d.each, t, lookupError(err))
			continue
		}
		err = d.sink.Dir(relp)
		if err == nil {
			d.sum.Dirs++
			err = d.walk(ctx, sub, relp, depth+1)
		} else if errors.Is(err, artifacts.ErrExists) {
			treeRecord(d.sum, d.each, t, refuse(artifacts.ReasonExists, "%v", err))
			err = nil
		}
		unix.Close(sub)
		if err != nil {
			return err
		}
	}
	return nil
}

// file passes one entry that is not a directory through the scanner into
// the sink; only an error that ends the download is returned.
func (d *treeDownload) file(ctx context.Context, dirfd int, name, rel string, t Transfer) error {
	left := d.lim.Bytes - d.read
	fo := artifacts.FileOptions{MaxBytes: max(1, min(d.opt.MaxBytes, d.lim.FileBytes, left)),
		Types: d.opt.Types, SourceText: d.opt.SourceText, AllowDotfiles: d.opt.AllowDotfiles}
	return DeliverTreeFile(d.sink, rel, t, d.sum, d.each, &d.read, func(w io.Writer) (artifacts.Artifact, error) {
		art, rej, err := artifacts.CopyFile(ctx, dirfd, name, t.Path, w, fo)
		switch {
		case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ENOTDIR):
			err = lookupError(err)
		case errors.Is(err, artifacts.ErrGrew):
			err = refuse(ReasonTooLarge, "%v", err)
		case err != nil:
			if ctx.Err() != nil {
				return art, ctx.Err()
			}
			return art, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
		case rej != nil:
			detail := rej.Detail
			if rej.Reason == artifacts.ReasonSymlink {
				detail = "a symlink, which airlock never follows"
			} else if rej.Reason == artifacts.ReasonTooLarge && left < d.lim.FileBytes {
				detail += fmt.Sprintf(" (what is left of the tree's %d-byte cap)", d.lim.Bytes)
			}
			err = refuse(rej.Reason, "%s", detail)
		}
		return art, err
	})
}

// treeNames lists at most n names of the directory dirfd, sorted.
func treeNames(dirfd, n int) ([]string, error) {
	dup, err := unix.Dup(dirfd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dup), "dir")
	defer f.Close()
	var names []string
	for len(names) < n {
		more, err := f.Readdirnames(min(1024, n-len(names)))
		names = append(names, more...)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	slices.Sort(names)
	return names, nil
}

// The pieces of a tree transfer that a sandbox reached only through
// one-file transfers (one on a cluster) shares with the local one, so
// that both judge entries and report them alike.

// RecordTreeEntry completes tr from err (accepted when nil), counts it
// in sum and gives it to each.
func RecordTreeEntry(sum *TreeSummary, each func(Transfer), tr Transfer, err error) {
	treeRecord(sum, each, tr, err)
}

// Refusal is the refusal of one entry for reason r.
func Refusal(r artifacts.Reason, format string, args ...any) error { return refuse(r, format, args...) }

// TreeEntryPath splits a tree entry's name into components below its
// target: refused when absolute, with "..", or with a name the scanner
// would not deliver.
func TreeEntryPath(name string) ([]string, error) { return entryPath(name) }

// TreePath is a record's sandbox path: base and rel joined, escaped.
func TreePath(base, rel string) string { return treePath(base, rel) }
