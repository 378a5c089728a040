// Package atomicfile writes files so that a reader sees either the old
// content or the new, never a mix, even if the writer dies midway.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Create writes data to a temporary file beside path, syncs it, and links
// it to path only if path does not exist yet: of concurrent creators one
// wins, and the others get an error wrapping fs.ErrExist. A reader never
// sees a partial file.
func Create(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("creating %q: %w", path, err)
	}
	defer os.Remove(f.Name()) // path, once linked, keeps the file
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// link(2), unlike rename(2), fails if path exists.
		err = os.Link(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("creating %q: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// WriteFile writes data to a temporary file beside path, syncs it, and
// renames it over path. The directory is created (0700) if missing.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, true)
}

// Replace is WriteFile without the syncs: readers never see a partial
// file, and a crash of the writer loses nothing, but a power loss may
// keep the old contents. It is for state that a power loss makes moot
// anyway (what live processes are doing).
func Replace(path string, data []byte, perm os.FileMode) error {
	return write(path, data, perm, false)
}

func write(path string, data []byte, perm os.FileMode, sync bool) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("writing %q: %w", path, err)
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %q: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("writing %q: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return fmt.Errorf("writing %q: %w", path, err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("writing %q: %w", path, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %q: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("writing %q: %w", path, err)
	}
	if !sync {
		return nil
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
