// Package realpath names a path as the kernel does: absolute, with its
// symlinks resolved, for paths compared with what /proc reports (the
// mount points of /proc/self/mountinfo).
package realpath

import (
	"errors"
	"io/fs"
	"path/filepath"
)

// Of returns path made absolute, with the symlinks of its longest existing
// prefix resolved and the rest appended as given (what is made there
// later, as plain directories, holds no symlink). It returns path cleaned
// when there is no working directory to make it absolute against.
func Of(path string) string {
	abs, err := filepath.Abs(path)
	if err != nil {
		return filepath.Clean(path)
	}
	rest := ""
	for p := abs; ; p = filepath.Dir(p) {
		real, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(real, rest)
		}
		if !errors.Is(err, fs.ErrNotExist) || p == filepath.Dir(p) {
			return abs
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}
