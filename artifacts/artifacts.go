package artifacts

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gabriel-vasile/mimetype"
)

// Reason is why a file was rejected. The words are stable.
type Reason string

const (
	ReasonSymlink        Reason = "symlink"
	ReasonHardlink       Reason = "hardlink"
	ReasonNotRegular     Reason = "not_regular"
	ReasonBadName        Reason = "bad_name"
	ReasonTooLarge       Reason = "too_large"
	ReasonTooMany        Reason = "too_many"
	ReasonTypeNotAllowed Reason = "type_not_allowed"
	ReasonTypeMismatch   Reason = "type_mismatch"
	// ReasonExists: the destination already holds something at that path;
	// delivery never replaces a file, a symlink or another user's directory.
	ReasonExists Reason = "exists"
	// ReasonHiddenName: a path component starts with '.' (.git, .ssh,
	// .bashrc), which tools act on by themselves; Options.AllowDotfiles
	// delivers them.
	ReasonHiddenName Reason = "hidden_name"
)

// Artifact is a file that passed every check.
type Artifact struct {
	// Path is relative to the output directory, with '/' separators.
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
	MIME   string `json:"mime"`
}

// Rejection is a file that did not pass, and why.
type Rejection struct {
	// Path is relative to the output directory; bytes that are not
	// printable UTF-8 are escaped as \xNN.
	Path   string `json:"path"`
	Reason Reason `json:"reason"`
	// Detail says more, for people: the detected type, the size, the cap.
	Detail string `json:"detail,omitempty"`
	// Quarantined is the path under the quarantine directory, when kept.
	Quarantined string `json:"quarantined,omitempty"`
}

// Report is every decision of one collection, in path order.
type Report struct {
	Artifacts []Artifact  `json:"artifacts"`
	Rejected  []Rejection `json:"rejected"`
}

// DefaultTypes is the default allowlist: text, CSV, JSON, PNG, JPEG, GIF,
// WebP and PDF.
var DefaultTypes = []string{
	"text/plain", "text/csv", "application/json",
	"image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf",
}

// Options bound a collection.
type Options struct {
	// Dest receives accepted files; empty means check and report only.
	Dest string
	// Quarantine, when set, receives rejected files that could be read
	// safely (wrong type, wrong extension, hardlink, bad name), under
	// escaped names.
	Quarantine string
	// MaxFileBytes caps one file; MaxTotalBytes all accepted files.
	MaxFileBytes, MaxTotalBytes int64
	// MaxFiles caps how many regular files are considered.
	MaxFiles int
	// Types is the MIME allowlist; nil means DefaultTypes.
	Types []string
	// AllowDotfiles delivers paths with a component that starts with '.'.
	AllowDotfiles bool
}

// ErrOptions is wrapped when Options are unusable.
var ErrOptions = errors.New("invalid artifact options")

func (o Options) validate() error {
	if o.MaxFileBytes <= 0 || o.MaxTotalBytes <= 0 || o.MaxFiles <= 0 {
		return fmt.Errorf("%w: caps must be positive (file %d, total %d, files %d)", ErrOptions, o.MaxFileBytes, o.MaxTotalBytes, o.MaxFiles)
	}
	for _, t := range o.Types {
		if mimetype.Lookup(t) == nil {
			return fmt.Errorf("%w: unknown MIME type %q; use types such as %s", ErrOptions, t, strings.Join(DefaultTypes, ", "))
		}
	}
	return nil
}

// extensions lists, for the types airlock knows well, the file extensions
// that agree with the content. "" means no extension. A type not listed
// agrees only with its own extension (mimetype's).
var extensions = map[string][]string{
	"text/plain":       {"", ".txt", ".text", ".log", ".md", ".out", ".err", ".diff", ".patch", ".csv", ".tsv"},
	"text/csv":         {".csv", ".txt"},
	"text/html":        {".html", ".htm"},
	"application/json": {".json"},
	"image/png":        {".png"},
	"image/jpeg":       {".jpg", ".jpeg"},
	"image/gif":        {".gif"},
	"image/webp":       {".webp"},
	"application/pdf":  {".pdf"},
	// Content nothing recognises: only no extension or a data extension,
	// never one a host program would open by itself (.html, .sh, .exe).
	// NumPy .npy, pickles and pre-zip PyTorch files land here.
	"application/octet-stream": {"", ".bin", ".dat", ".raw", ".npy", ".pt", ".pth", ".pkl", ".pickle",
		".joblib", ".ckpt", ".safetensors", ".onnx", ".h5", ".hdf5", ".arrow", ".feather", ".msgpack",
		".pb", ".tfrecord", ".idx", ".weights", ".model"},
	"application/gzip": {".gz", ".tgz"},
	// PyTorch and Keras save zip archives; .jar, .docx, .apk and the like
	// are detected as types of their own.
	"application/zip":                {".zip", ".whl", ".npz", ".egg", ".pt", ".pth", ".keras"},
	"application/x-tar":              {".tar"},
	"application/vnd.apache.parquet": {".parquet", ".pq"},
}

// agreeing lists the extensions that agree with m, for messages.
func agreeing(m *mimetype.MIME) []string {
	if exts, ok := extensions[baseType(m.String())]; ok {
		return exts
	}
	return []string{m.Extension()}
}

// extensionAgrees reports whether ext (lower case, with its dot) fits the
// detected type m.
func extensionAgrees(m *mimetype.MIME, ext string) bool {
	return slices.Contains(agreeing(m), ext)
}

// mismatchDetail says why ext does not fit m and what would.
func mismatchDetail(m *mimetype.MIME, ext string) string {
	var names []string
	for _, e := range agreeing(m) {
		if e == "" {
			e = "no extension"
		}
		names = append(names, e)
	}
	return fmt.Sprintf("content is %s, name ends in %q; airlock delivers that content only as %s: rename the file",
		baseType(m.String()), ext, strings.Join(names, ", "))
}

func baseType(s string) string {
	t, _, _ := strings.Cut(s, ";")
	return strings.TrimSpace(t)
}

// allowed reports whether m is on the allowlist, exactly: allowing
// application/octet-stream does not allow an executable, nor
// application/zip a .jar. An alias (application/x-gzip) allows its type.
func allowed(types []string, m *mimetype.MIME) bool {
	if types == nil {
		types = DefaultTypes
	}
	base := baseType(m.String())
	for _, t := range types {
		if t == base {
			return true
		}
		if l := mimetype.Lookup(t); l != nil && baseType(l.String()) == base {
			return true
		}
	}
	return false
}
