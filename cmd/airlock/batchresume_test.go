package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A resumed batch reads result lines of any size; a torn last line is not
// a result.
func TestDoneIDsLongLines(t *testing.T) {
	p := filepath.Join(t.TempDir(), "results.jsonl")
	big := `{"job_id": "big", "stdout": {"head": "` + strings.Repeat("x", 70<<20) + `"}}`
	os.WriteFile(p, []byte(`{"job_id": "a"}`+"\n"+big+"\n"+`{"job_id": "b"}`+"\n"+`{"job_id": "torn", "std`), 0o644)
	done, err := doneIDs(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(done) != 3 || !done["a"] || !done["big"] || !done["b"] {
		t.Errorf("done %v, want a, big and b", done)
	}
}
