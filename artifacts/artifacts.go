package artifacts

import (
	"errors"
	"fmt"
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
// that agree with the content. "" means no extension.
var extensions = map[string][]string{
	"text/plain":       {"", ".txt", ".text", ".log", ".md", ".out", ".err", ".diff", ".patch", ".csv", ".tsv"},
	"text/csv":         {".csv", ".txt"},
	"application/json": {".json"},
	"image/png":        {".png"},
	"image/jpeg":       {".jpg", ".jpeg"},
	"image/gif":        {".gif"},
	"image/webp":       {".webp"},
	"application/pdf":  {".pdf"},
}

// extensionAgrees reports whether ext (lower case, with its dot) fits the
// detected type m.
func extensionAgrees(m *mimetype.MIME, ext string) bool {
	base := baseType(m.String())
	if exts, ok := extensions[base]; ok {
		for _, e := range exts {
			if e == ext {
				return true
			}
		}
		return false
	}
	return ext == m.Extension()
}

func baseType(s string) string {
	t, _, _ := strings.Cut(s, ";")
	return strings.TrimSpace(t)
}

func allowed(types []string, m *mimetype.MIME) bool {
	if types == nil {
		types = DefaultTypes
	}
	base := baseType(m.String())
	for _, t := range types {
		if t == base {
			return true
		}
	}
	return false
}
