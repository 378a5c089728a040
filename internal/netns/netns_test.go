//go:build linux

package netns

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// List finds the ids a crashed owner left, whichever of their two files
// is left; Remove takes what is there and refuses what is not an id.
func TestListRemove(t *testing.T) {
	dir := t.TempDir()
	if ids, err := List(filepath.Join(dir, "missing")); err != nil || ids != nil {
		t.Errorf("a missing directory: %v, %v", ids, err)
	}
	for _, name := range []string{"sb-b.sandbox", "sb-b.proxy", "sb-a.proxy", "other", ".x.sandbox", "sb-c.sandboxes"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o400); err != nil {
			t.Fatal(err)
		}
	}
	if ids, err := List(dir); err != nil || !slices.Equal(ids, []string{"sb-a", "sb-b"}) {
		t.Errorf("List: %v, %v", ids, err)
	}
	for _, id := range []string{"sb-a", "sb-b", "sb-never"} {
		if err := Remove(dir, id); err != nil {
			t.Errorf("Remove(%q): %v", id, err)
		}
	}
	if ids, err := List(dir); err != nil || len(ids) != 0 {
		t.Errorf("List after Remove: %v, %v", ids, err)
	}
	for _, bad := range []string{"", "..", "../other", "a/b"} {
		if err := Remove(dir, bad); err == nil {
			t.Errorf("Remove(%q) took it", bad)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "other")); err != nil {
		t.Errorf("Remove took another file: %v", err)
	}
}
