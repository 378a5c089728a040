package artifacts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"

	"github.com/gabriel-vasile/mimetype"
	"golang.org/x/sys/unix"
)

// SessionTypes is the download allowlist of long-lived sandboxes:
// DefaultTypes plus source code as text, because agents read the code they
// wrote. Never HTML, SVG or XML, which a browser would run.
var SessionTypes = append(slices.Clone(DefaultTypes),
	"text/x-python", "text/javascript", "text/x-shellscript", "text/x-perl", "text/x-lua",
	"text/tab-separated-values", "application/x-ndjson")

// sourceTypes are the contents that sourceExtensions agree with when
// FileOptions.SourceText is set.
var sourceTypes = []string{"text/plain", "text/csv", "text/tab-separated-values", "application/json", "application/x-ndjson",
	"text/x-python", "text/javascript", "text/x-shellscript", "text/x-perl", "text/x-lua"}

// sourceExtensions are source and configuration files that are plain text.
var sourceExtensions = []string{
	".py", ".pyi", ".ipynb", ".js", ".mjs", ".cjs", ".ts", ".tsx", ".jsx", ".sh", ".bash", ".zsh",
	".go", ".mod", ".sum", ".rs", ".c", ".h", ".cc", ".cpp", ".hpp", ".java", ".kt", ".scala", ".rb",
	".pl", ".lua", ".r", ".jl", ".swift", ".cs", ".sql", ".toml", ".yaml", ".yml", ".ini", ".cfg",
	".conf", ".md", ".rst", ".txt", ".csv", ".tsv", ".jsonl", ".ndjson", ".css", ".scss", ".proto",
	".gradle", ".make", ".mk", ".cmake", ".lock", ".env", ".tf", ".dockerfile",
}

// ReasonIsDirectory: a single file was asked for and a directory found.
const ReasonIsDirectory Reason = "is_directory"

// smallFile is the size below which CopyFile copies and hashes in one
// goroutine, with a pooled buffer.
const smallFile = 1 << 20

var copyBufs = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

// FileOptions bound the check of one file.
type FileOptions struct {
	// MaxBytes caps the file; it must be positive.
	MaxBytes int64
	// Types is the MIME allowlist; nil means DefaultTypes.
	Types []string
	// SourceText lets source-code extensions (.py, .go, .yaml, …) name
	// text content.
	SourceText bool
	// AllowDotfiles accepts a name starting with '.'.
	AllowDotfiles bool
}

// CheckName says why name is not a safe single path component, or "" when
// it is. Names starting with ".airlock-" are reserved for temporary files.
func CheckName(name string) string { return checkName(name) }

// CopyFile checks the entry name in the directory dirfd by the scanner's
// rules and, when it passes, writes it to w: a symlink, a FIFO, a device,
// a socket, a directory or a hardlinked file is refused without being
// read (nothing is opened in a way that could block), the size is checked
// on the open fd before reading (a sparse file is refused, as Collect
// refuses it), and the type is detected from the bytes written, before
// any of them reach w. shown names the file in reports.
// It returns an error only when it cannot do its job (w failed, ctx
// done); a refused file is a Rejection.
func CopyFile(ctx context.Context, dirfd int, name, shown string, w io.Writer, opt FileOptions) (Artifact, *Rejection, error) {
	reject := func(r Reason, detail string) (Artifact, *Rejection, error) {
		return Artifact{}, &Rejection{Path: shown, Reason: r, Detail: detail}, nil
	}
	if opt.MaxBytes <= 0 {
		return Artifact{}, nil, fmt.Errorf("%w: the file cap must be positive", ErrOptions)
	}
	if why := checkName(name); why != "" {
		return reject(ReasonBadName, why)
	}
	if name[0] == '.' && !opt.AllowDotfiles {
		return reject(ReasonHiddenName, fmt.Sprintf("%q starts with '.', and tools act on dotfiles by themselves (.git, .ssh, .bashrc)", Escape(name)))
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return Artifact{}, nil, err
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFLNK:
		return reject(ReasonSymlink, "")
	case unix.S_IFDIR:
		return reject(ReasonIsDirectory, "")
	default:
		return reject(ReasonNotRegular, fileType(st.Mode))
	}
	fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{
		Flags:   unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_NOCTTY | unix.O_CLOEXEC,
		Resolve: resolve.Resolve,
	})
	if err != nil {
		return reject(ReasonNotRegular, "cannot open: "+err.Error())
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	// Trust only the open fd: the file listed, still regular, one link.
	var fst unix.Stat_t
	if err := unix.Fstat(fd, &fst); err != nil || fst.Ino != st.Ino || fst.Dev != st.Dev || fst.Mode&unix.S_IFMT != unix.S_IFREG {
		return reject(ReasonNotRegular, "changed while being checked")
	}
	if fst.Nlink > 1 {
		return reject(ReasonHardlink, fmt.Sprintf("%d links", fst.Nlink))
	}
	if fst.Size > opt.MaxBytes {
		return reject(ReasonTooLarge, fmt.Sprintf("%d bytes, over the %d-byte file cap", fst.Size, opt.MaxBytes))
	}
	if sparse(&fst) {
		return reject(ReasonTooLarge, fmt.Sprintf("%d bytes, of which %d are stored (a sparse file): airlock reads only files whose bytes were written", fst.Size, fst.Blocks*512))
	}
	return copyChecked(ctx, f, name, shown, w, opt, fst.Size < smallFile)
}

// CheckStream applies CopyFile's checks that do not need a file (the name,
// the type detected from the head, the extension, the cap) to r, the
// content of a file named name that was read elsewhere (inside a remote
// sandbox), and writes it to w when the head passes. The type is decided
// before any byte reaches w; a stream past opt.MaxBytes is refused as
// too large once w has had MaxBytes bytes, and w must then be discarded.
func CheckStream(ctx context.Context, r io.Reader, name, shown string, w io.Writer, opt FileOptions) (Artifact, *Rejection, error) {
	if opt.MaxBytes <= 0 {
		return Artifact{}, nil, fmt.Errorf("%w: the file cap must be positive", ErrOptions)
	}
	if why := checkName(name); why != "" {
		return Artifact{}, &Rejection{Path: shown, Reason: ReasonBadName, Detail: why}, nil
	}
	if name[0] == '.' && !opt.AllowDotfiles {
		return Artifact{}, &Rejection{Path: shown, Reason: ReasonHiddenName, Detail: fmt.Sprintf("%q starts with '.', and tools act on dotfiles by themselves (.git, .ssh, .bashrc)", Escape(name))}, nil
	}
	a, rej, err := copyChecked(ctx, r, name, shown, w, opt, false)
	if errors.Is(err, ErrGrew) {
		return Artifact{}, &Rejection{Path: shown, Reason: ReasonTooLarge, Detail: fmt.Sprintf("over the %d-byte file cap", opt.MaxBytes)}, nil
	}
	return a, rej, err
}

// copyChecked decides f's type from its head and copies it to w, capped.
func copyChecked(ctx context.Context, f io.Reader, name, shown string, w io.Writer, opt FileOptions, small bool) (Artifact, *Rejection, error) {
	reject := func(r Reason, detail string) (Artifact, *Rejection, error) {
		return Artifact{}, &Rejection{Path: shown, Reason: r, Detail: detail}, nil
	}
	// The type comes from the head, and the head read is the one sent.
	head := make([]byte, sniffLen)
	k, err := io.ReadFull(ctxReader{ctx, f}, head)
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return Artifact{}, nil, fmt.Errorf("reading %q: %w", shown, err)
	}
	head = head[:k]
	m := mimetype.Detect(head)
	ext := lowerExt(name)
	switch {
	case !allowed(opt.Types, m):
		return reject(ReasonTypeNotAllowed, "content is "+baseType(m.String())+", which the type allowlist does not list")
	case !extensionAgrees(m, ext) && !(opt.SourceText && sourceText(m, ext)):
		return reject(ReasonTypeMismatch, mismatchDetail(m, ext))
	}
	// The rest may grow while it is read (the sandbox lives): the cap holds.
	cw := &CountingWriter{W: w}
	r := io.MultiReader(bytes.NewReader(head), io.LimitReader(ctxReader{ctx, f}, opt.MaxBytes+1-int64(k)))
	var n int64
	var sum []byte
	if small {
		// Hashing beside the copy costs more than it saves here.
		buf := copyBufs.Get().(*[]byte)
		h := sha256.New()
		n, err = io.CopyBuffer(io.MultiWriter(cw, h), r, *buf)
		copyBufs.Put(buf)
		sum = h.Sum(nil)
	} else {
		c := &collector{}
		n, sum, _, err = c.copyHashed(cw, r)
	}
	if err != nil {
		return Artifact{}, nil, fmt.Errorf("copying %q: %w", shown, err)
	}
	if n > opt.MaxBytes {
		return Artifact{}, nil, fmt.Errorf("copying %q: %w: it grew past the %d-byte cap while being read; %d bytes were written", shown, ErrGrew, opt.MaxBytes, cw.N)
	}
	return Artifact{Path: shown, Size: n, SHA256: hex.EncodeToString(sum), MIME: baseType(m.String())}, nil, nil
}

// ErrGrew is wrapped when a file grew past its cap while being copied: w
// holds a truncated copy and should be discarded.
var ErrGrew = errors.New("file grew past its cap")

func sourceText(m *mimetype.MIME, ext string) bool {
	return slices.Contains(sourceTypes, baseType(m.String())) && slices.Contains(sourceExtensions, ext)
}

// CountingWriter counts in N what passes through it to W.
type CountingWriter struct {
	W io.Writer
	N int64
}

func (c *CountingWriter) Write(p []byte) (int, error) {
	k, err := c.W.Write(p)
	c.N += int64(k)
	return k, err
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
