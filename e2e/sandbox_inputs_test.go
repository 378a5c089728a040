//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSandboxInputs: `sandbox create --input` copies a file and a
// directory in, read-only, where every exec finds them; the sandbox's
// removal takes them too.
func TestSandboxInputs(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "data.csv"), []byte("a,b\n1,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(dir, "src")
	os.Mkdir(src, 0o755)
	if err := os.WriteFile(filepath.Join(src, "mod.py"), []byte("X = 42\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	si := sbCreate(t, "--input", filepath.Join(dir, "data.csv"), "--input", src+":/work/src")
	defer func() {
		if c := airlock(nil, "sandbox", "rm", si.ID); c.code != 0 {
			t.Errorf("sandbox rm: exit %d %s", c.code, c.stderr)
		}
		// The supervisor notices within its second's tick.
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			left := sbGone(si.ID)
			if len(left) == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("left 5s after rm: %v", left)
				break
			}
		}
	}()
	res, _ := sbExec(t, si.ID, nil, "sh", "-c", `cat /work/data.csv; cat /work/src/mod.py; echo x >> /work/data.csv 2>/dev/null && echo WROTE || echo refused`)
	if got := string(res.Stdout.Head); got != "a,b\n1,2\nX = 42\nrefused\n" || res.ExitCode != 0 {
		t.Fatalf("exec over the inputs: exit %d stdout %q stderr %q", res.ExitCode, got, res.Stderr.Head)
	}
	// A second exec finds them unchanged.
	res, _ = sbExec(t, si.ID, nil, "cat", "/work/data.csv")
	if string(res.Stdout.Head) != "a,b\n1,2\n" {
		t.Fatalf("second exec: %q", res.Stdout.Head)
	}
	// Refused as a run refuses them: a missing input names itself.
	if c := airlock(nil, "sandbox", "create", "--engine", engineName, "--isolation", isolationName, "--input", filepath.Join(dir, "missing")); c.code == 0 || !strings.Contains(c.stderr, "missing") {
		t.Fatalf("a missing input: exit %d %s", c.code, c.stderr)
	}
}
