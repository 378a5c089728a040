package realpath_test

import (
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/realpath"
	"github.com/airlock-sandbox/airlock/internal/roottest"
)

// A path is made absolute against the working directory, the symlinks of
// its existing part resolved, and the part that does not exist yet kept
// as given.
func TestOf(t *testing.T) {
	base := roottest.LinkedDir(t)
	real := filepath.Join(base, "real")
	for given, want := range map[string]string{
		"real":                           real,
		"link":                           real,
		"./link/":                        real,
		filepath.Join(base, "link"):      real,
		"link/not/yet":                   filepath.Join(real, "not", "yet"),
		"missing/either":                 filepath.Join(base, "missing", "either"),
		filepath.Join(base, "link", "x"): filepath.Join(real, "x"),
	} {
		if got := realpath.Of(given); got != want {
			t.Errorf("Of(%q) = %q; want %q", given, got, want)
		}
	}
}
