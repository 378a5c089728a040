package templates

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/internal/flock"
	"github.com/airlock-sandbox/airlock/wire"
)

// Store is the set of templates under airlock's root.
type Store struct {
	dir string
}

// Open uses <root>/templates. Nothing is read or made until a call needs it.
func Open(root string) *Store { return &Store{dir: filepath.Join(root, "templates")} }

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) path(name string) string { return filepath.Join(s.dir, name+".json") }

func profilePath(dir, sum string) string { return filepath.Join(dir, "seccomp", sum+".json") }

// maxFile caps a template file read back; a template is a few hundred bytes.
const maxFile = 1 << 20

// Put stores t under its name. A template of that name already there is
// left alone, and the error wraps errdefs.ErrAlreadyExists.
func (s *Store) Put(t *Template) error { return s.put(t, false) }

// Replace stores t under its name, replacing any template of that name.
func (s *Store) Replace(t *Template) error { return s.put(t, true) }

func (s *Store) put(t *Template, replace bool) error {
	if err := t.Validate(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding template %q: %w", t.Name, err)
	}
	b = append(b, '\n')
	return s.locked(func() error {
		if t.SeccompSHA256 != "" && t.profile != nil {
			if err := atomicfile.WriteFile(profilePath(s.dir, t.SeccompSHA256), t.profile, 0o600); err != nil {
				return fmt.Errorf("%w: storing template %q's seccomp profile: %v", errdefs.ErrUnavailable, t.Name, err)
			}
		}
		p := s.path(t.Name)
		if replace {
			err = atomicfile.WriteFile(p, b, 0o600)
		} else {
			err = atomicfile.Create(p, b, 0o600)
		}
		switch {
		case errors.Is(err, fs.ErrExist):
			return fmt.Errorf("%w: template %q exists already: give --replace to replace it, or choose another name (`airlock template ls` lists them)", errdefs.ErrAlreadyExists, t.Name)
		case err != nil:
			return fmt.Errorf("%w: storing template %q: %v", errdefs.ErrUnavailable, t.Name, err)
		}
		// A replaced template's profile copy stays until a Remove, so a
		// run that read the old template just before still finds it.
		t.dir = s.dir
		return nil
	})
}

// Get reads the template named name. A missing one wraps errdefs.ErrNotFound;
// a file that does not read back as a valid template (or whose profile copy
// no longer matches) is an error naming the file and the fix.
func (s *Store) Get(name string) (*Template, error) {
	if err := CheckName(name); err != nil {
		return nil, err
	}
	t, err := s.read(name)
	if err != nil {
		return nil, err
	}
	return t, nil
}

func (s *Store) read(name string) (*Template, error) {
	p := s.path(name)
	b, err := readCapped(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: no template %q: `airlock template ls` lists the templates, and `airlock template create %s` makes one", errdefs.ErrNotFound, name, name)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: reading template %q: %v", errdefs.ErrUnavailable, name, err)
	}
	corrupt := func(err error) error {
		return fmt.Errorf("%w: template file %s is corrupt (%v): edit the file, or remove it with `airlock template rm %s` and create the template again (`airlock template create %s`)", errdefs.ErrDataLoss, p, err, name, name)
	}
	t := &Template{dir: s.dir}
	if err := json.Unmarshal(b, t); err != nil {
		return nil, corrupt(err)
	}
	if t.Name != name {
		return nil, corrupt(fmt.Errorf("it names template %q", t.Name))
	}
	if err := t.Validate(); err != nil {
		return nil, corrupt(err)
	}
	return t, nil
}

func readCapped(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Read on every request that names a template: sized by the file,
	// not by the cap.
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFile {
		return nil, fmt.Errorf("larger than %d bytes", maxFile)
	}
	return b, nil
}

// List returns every template, by name. Templates that cannot be read do
// not hide the others: they come back joined in the error, each naming its
// file and the fix.
func (s *Store) List() ([]Template, error) {
	names, err := s.names()
	if err != nil {
		return nil, err
	}
	var out []Template
	var errs []error
	for _, n := range names {
		t, err := s.read(n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, *t)
	}
	return out, errors.Join(errs...)
}

// names lists the template files' names, sorted.
func (s *Store) names() ([]string, error) {
	ents, err := os.ReadDir(s.dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%w: listing templates: %v", errdefs.ErrUnavailable, err)
	}
	var names []string
	for _, e := range ents {
		if n, ok := strings.CutSuffix(e.Name(), ".json"); ok && e.Type().IsRegular() && nameRE.MatchString(n) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	return names, nil
}

// Remove deletes the template named name; one that is not there is an
// error wrapping errdefs.ErrNotFound. A corrupt template can be removed.
func (s *Store) Remove(name string) error {
	if err := CheckName(name); err != nil {
		return err
	}
	return s.locked(func() error {
		err := os.Remove(s.path(name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("%w: no template %q: `airlock template ls` lists the templates", errdefs.ErrNotFound, name)
		case err != nil:
			return fmt.Errorf("%w: removing template %q: %v", errdefs.ErrUnavailable, name, err)
		}
		return s.collect()
	})
}

// collect removes profile copies no template names any more (left by
// Remove, Replace or a refused Put). It runs under the store's lock, on
// Remove; a template file it cannot read keeps every profile.
func (s *Store) collect() error {
	ents, err := os.ReadDir(filepath.Join(s.dir, "seccomp"))
	if err != nil {
		return nil // no profiles kept
	}
	names, err := s.names()
	if err != nil {
		return nil
	}
	used := map[string]bool{}
	for _, n := range names {
		b, err := readCapped(s.path(n))
		var w wireTemplate
		if err != nil || json.Unmarshal(b, &w) != nil || wire.CheckKeys(b, &w) != nil {
			return nil // a profile may be this file's: keep them all
		}
		used[w.SeccompSHA256] = true
	}
	for _, e := range ents {
		if sum, ok := strings.CutSuffix(e.Name(), ".json"); ok && sha256RE.MatchString(sum) && !used[sum] {
			os.Remove(filepath.Join(s.dir, "seccomp", e.Name()))
		}
	}
	return nil
}

// locked runs fn holding the store's lock, making the directory (0700).
func (s *Store) locked(fn func() error) error {
	if err := os.MkdirAll(filepath.Join(s.dir, "seccomp"), 0o700); err != nil {
		return fmt.Errorf("%w: making %s: %v", errdefs.ErrUnavailable, s.dir, err)
	}
	return flock.With(filepath.Join(s.dir, ".lock"), fn)
}
