package runner

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
)

// A supervisor learns of its record's removal when it happens; a
// replaced record, or another sandbox's removal, is not a removal.
func TestRecordGone(t *testing.T) {
	root := t.TempDir()
	dir := sandboxesDir(root)
	for _, id := range []string{"sb-a", "sb-b"} {
		if err := atomicfile.WriteFile(filepath.Join(dir, id+".json"), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	gone, stop := recordGone(root, "sb-a")
	defer stop()
	if err := atomicfile.Replace(filepath.Join(dir, "sb-a.json"), []byte(`{"x":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "sb-b.json"))
	select {
	case <-gone:
		t.Fatal("woken by a replaced record or another sandbox's removal")
	case <-time.After(200 * time.Millisecond):
	}
	os.Remove(filepath.Join(dir, "sb-a.json"))
	select {
	case <-gone:
	case <-time.After(5 * time.Second):
		t.Fatal("the record's removal was not seen")
	}
}
