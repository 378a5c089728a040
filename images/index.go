package images

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/internal/flock"
	"github.com/opencontainers/go-digest"
)

// Record is airlock's note of one imported image.
type Record struct {
	Name       string        `json:"name,omitempty"`
	ID         digest.Digest `json:"id"`
	Manifest   digest.Digest `json:"manifest,omitempty"`
	Format     string        `json:"format"`
	Size       int64         `json:"size"`
	ImportedAt time.Time     `json:"imported_at"`
}

// Ref is the record's pinned reference.
func (r Record) Ref() Ref { return Ref{Name: r.Name, ID: r.ID} }

// Lock names the default image: the one `airlock run` uses without --image.
type Lock struct {
	Ref     string    `json:"ref"`
	BuiltAt time.Time `json:"built_at"`
	// Recipe is the sha256 of the build script that made the image, so a
	// changed recipe triggers a rebuild.
	Recipe string `json:"recipe,omitempty"`
}

// ErrNoDefault is wrapped when no default image has been built.
var ErrNoDefault = errors.New("no default image")

// Index is the set of records under airlock's root.
type Index struct {
	dir string
}

// OpenIndex uses dir (usually <root>/images) for the records.
func OpenIndex(dir string) *Index { return &Index{dir: dir} }

func (x *Index) path() string     { return filepath.Join(x.dir, "index.json") }
func (x *Index) lockPath() string { return filepath.Join(x.dir, "default.lock") }

// List returns the records, newest first.
func (x *Index) List() ([]Record, error) {
	b, err := os.ReadFile(x.path())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading image index: %w", err)
	}
	var recs []Record
	if err := json.Unmarshal(b, &recs); err != nil {
		return nil, fmt.Errorf("reading image index %q: %w (move it aside and re-import the images)", x.path(), err)
	}
	slices.SortFunc(recs, func(a, b Record) int { return b.ImportedAt.Compare(a.ImportedAt) })
	return recs, nil
}

// Add records r, replacing any record with the same ID.
func (x *Index) Add(r Record) error {
	_, err := x.Put(r)
	return err
}

// Put is Add, and returns undo, which puts back the records of r.ID as they
// were, for an import that fails after this step.
func (x *Index) Put(r Record) (undo func() error, err error) {
	var old []Record
	err = x.rewrite(func(recs []Record) []Record {
		return append(slices.DeleteFunc(recs, func(o Record) bool {
			if o.ID == r.ID {
				old = append(old, o)
				return true
			}
			return false
		}), r)
	})
	if err != nil {
		return nil, err
	}
	return func() error {
		return x.rewrite(func(recs []Record) []Record {
			return append(slices.DeleteFunc(recs, func(o Record) bool { return o.ID == r.ID }), old...)
		})
	}, nil
}

// Remove drops every record of image id; removed says whether there was one.
func (x *Index) Remove(id digest.Digest) (removed bool, err error) {
	err = x.rewrite(func(recs []Record) []Record {
		n := len(recs)
		recs = slices.DeleteFunc(recs, func(o Record) bool { return o.ID == id })
		removed = len(recs) < n
		return recs
	})
	return removed, err
}

// rewrite replaces the records with what fn makes of them, under the lock.
func (x *Index) rewrite(fn func([]Record) []Record) error {
	return x.locked(func() error {
		recs, err := x.List()
		if err != nil {
			return err
		}
		recs = fn(recs)
		if recs == nil {
			recs = []Record{}
		}
		b, err := json.MarshalIndent(recs, "", "  ")
		if err != nil {
			return err
		}
		return atomicfile.WriteFile(x.path(), append(b, '\n'), 0o644)
	})
}

// Default reads the default image's lock.
func (x *Index) Default() (Lock, Ref, error) {
	b, err := os.ReadFile(x.lockPath())
	if errors.Is(err, fs.ErrNotExist) {
		return Lock{}, Ref{}, fmt.Errorf("%w: %s does not exist; build it with `make setup`, or pass --image NAME@sha256:…", ErrNoDefault, x.lockPath())
	}
	if err != nil {
		return Lock{}, Ref{}, fmt.Errorf("reading %q: %w", x.lockPath(), err)
	}
	var l Lock
	if err := json.Unmarshal(b, &l); err != nil {
		return Lock{}, Ref{}, fmt.Errorf("%w: %s is corrupt (%v); rebuild it with `make setup`", ErrNoDefault, x.lockPath(), err)
	}
	r, err := ParseRef(l.Ref)
	if err != nil {
		return Lock{}, Ref{}, fmt.Errorf("%w: %s names %q: %w; rebuild it with `make setup`", ErrNoDefault, x.lockPath(), l.Ref, err)
	}
	return l, r, nil
}

// SetDefault writes the lock.
func (x *Index) SetDefault(l Lock) error {
	if _, err := ParseRef(l.Ref); err != nil {
		return err
	}
	b, err := json.MarshalIndent(l, "", "  ")
	if err != nil {
		return err
	}
	return x.locked(func() error { return atomicfile.WriteFile(x.lockPath(), append(b, '\n'), 0o644) })
}

// locked runs fn under an exclusive lock on the index directory, so that
// concurrent imports do not lose each other's records.
func (x *Index) locked(fn func() error) error {
	if err := os.MkdirAll(x.dir, 0o755); err != nil {
		return fmt.Errorf("creating %q: %w", x.dir, err)
	}
	return flock.With(filepath.Join(x.dir, ".lock"), fn)
}
