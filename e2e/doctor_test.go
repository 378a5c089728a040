//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// doctorRow is one row of `airlock doctor`'s table.
type doctorRow struct {
	name, status, detail, fix string
}

// doctorRows reads the table: columns start where the header's words do,
// and a fix line sits under its row.
func doctorRows(t *testing.T, out string) []doctorRow {
	t.Helper()
	lines := strings.Split(out, "\n")
	head := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "CHECK ") {
			head = i
			break
		}
	}
	if head < 0 {
		t.Fatalf("no table in:\n%s", out)
	}
	st, de := strings.Index(lines[head], "STATUS"), strings.Index(lines[head], "DETAIL")
	var rows []doctorRow
	for _, l := range lines[head+1:] {
		if l == "" {
			break
		}
		if len(l) < de {
			t.Fatalf("short line %q in:\n%s", l, out)
		}
		if strings.TrimSpace(l[:de]) == "" {
			if len(rows) == 0 || !strings.HasPrefix(l[de:], "fix: ") {
				t.Fatalf("stray line %q in:\n%s", l, out)
			}
			rows[len(rows)-1].fix = strings.TrimPrefix(l[de:], "fix: ")
			continue
		}
		rows = append(rows, doctorRow{
			name:   strings.TrimSpace(l[:st]),
			status: strings.TrimSpace(l[st:de]),
			detail: l[de:],
		})
	}
	return rows
}

func TestDoctorPasses(t *testing.T) {
	c := airlock(nil, "doctor", "--engine", engineName, "--isolation", isolationName)
	t.Logf("airlock doctor:\n%s", c.stdout)
	if c.code != 0 {
		t.Errorf("exit %d, want 0; stderr %s", c.code, c.stderr)
	}
	seen := map[string]bool{}
	for _, r := range doctorRows(t, c.stdout) {
		seen[r.name] = true
		if r.status != "ok" && r.status != "warn" {
			t.Errorf("%s: %s %s (fix: %s)", r.name, r.status, r.detail, r.fix)
		}
	}
	// The live probe ran: a doctor that skipped it proves nothing.
	for _, name := range []string{"root", "runsc", "cgroups", "seccomp", "dockerd", "free space",
		"probe: no network", "probe: read-only root", "probe: no capabilities", "probe: limits enforced"} {
		if !seen[name] {
			t.Errorf("no %q row", name)
		}
	}
	noSandboxLeft(t)
}

// TestDoctorMissingRunsc points doctor at a root like the tests' own, but
// whose tools directory has no runsc; the real install is not touched.
func TestDoctorMissingRunsc(t *testing.T) {
	tmp := t.TempDir()
	for _, d := range []string{"images", "tools"} {
		if err := os.Mkdir(filepath.Join(tmp, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	lock, err := os.ReadFile(filepath.Join(rootDir, "images", "default.lock"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, "images", "default.lock"), lock, 0o644); err != nil {
		t.Fatal(err)
	}
	store, err := os.Readlink(filepath.Join(rootDir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(store, filepath.Join(tmp, "store")); err != nil {
		t.Fatal(err)
	}

	// The helper passes the tests' --root first; the later one wins.
	c := airlock(nil, "--root", tmp, "doctor", "--engine", "oci")
	t.Logf("airlock doctor:\n%s", c.stdout)
	if c.code != 69 {
		t.Errorf("exit %d, want 69; stderr %s", c.code, c.stderr)
	}
	var runsc *doctorRow
	rows := doctorRows(t, c.stdout)
	for i := range rows {
		if rows[i].name == "runsc" {
			runsc = &rows[i]
		}
	}
	if runsc == nil || runsc.status != "FAIL" || !strings.Contains(runsc.detail, filepath.Join(tmp, "tools", "runsc")) || !strings.Contains(runsc.fix, "make setup") {
		t.Errorf("runsc row %+v: want FAIL naming %s with a fix that says make setup", runsc, filepath.Join(tmp, "tools", "runsc"))
	}

	c = airlock(nil, "--root", tmp, "doctor", "--engine", "oci", "--json")
	if c.code != 69 {
		t.Errorf("--json: exit %d, want 69; stderr %s", c.code, c.stderr)
	}
	var rep struct {
		Checks []struct{ Name, Status, Detail, Fix string } `json:"checks"`
		OK     bool                                         `json:"ok"`
	}
	if err := json.Unmarshal([]byte(c.stdout), &rep); err != nil {
		t.Fatalf("--json: %v: %q", err, c.stdout)
	}
	failed := false
	for _, ch := range rep.Checks {
		if ch.Name == "runsc" && ch.Status == "FAIL" && strings.Contains(ch.Fix, "make setup") {
			failed = true
		}
	}
	if rep.OK || !failed {
		t.Errorf("--json: %+v, want ok false and runsc FAIL", rep)
	}
}
