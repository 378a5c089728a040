//go:build e2e

package e2e

import (
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/imagetest"
	"github.com/airlock-sandbox/airlock/runner"
	seccompprofiles "github.com/airlock-sandbox/airlock/seccomp-profiles"
)

// TestProbeDeniesEverything runs the probe, which attempts every call the
// seccomp profile denies (natively, through int 0x80 and through the x32
// ABI, which the profile leaves out), in the isolation mode under test.
func TestProbeDeniesEverything(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "probe")
	build := exec.Command("go", "build", "-o", bin, "../internal/probe")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the probe: %v\n%s", err, out)
	}
	probe, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	layout := filepath.Join(dir, "layout")
	if err := imagetest.BusyboxLayoutFiles(layout, imagetest.File{Name: "bin/probe", Mode: 0o755, Data: probe}); err != nil {
		t.Fatal(err)
	}
	c := airlock(nil, "image", "import", "--name", "airlock-e2e/probe", layout)
	if c.code != 0 {
		t.Fatalf("import: %s", c.stderr)
	}
	res, _ := runJSON(t, nil, "--image", strings.TrimSpace(c.stdout), "--", "/bin/probe")
	out := string(res.Stdout.Head)
	if res.Reason != runner.ReasonExited || res.ExitCode != 0 || !strings.HasSuffix(out, "\ndone\n") {
		t.Fatalf("probe: reason %s exit %d\n%s\n%s", res.Reason, res.ExitCode, out, res.Stderr.Head)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// A host kernel without 32-bit system call entry (IA32 emulation off,
	// as some kernels are built or booted, e.g. ia32_emulation=0) answers
	// every int 0x80 with SIGSEGV before any filter: the call is never
	// made. That counts only when every int 0x80 attempt says so.
	int80, segv := 0, 0
	for _, line := range lines[1 : len(lines)-1] {
		if f := strings.Fields(line); len(f) == 3 && strings.HasPrefix(f[0], "int80_") {
			int80++
			if f[1] == "-11" {
				segv++
			}
		}
	}
	noIA32 := int80 > 0 && segv == int80
	if noIA32 {
		t.Logf("every int 0x80 attempt (%d) got SIGSEGV: this kernel has no 32-bit system call entry", int80)
	}
	var attempts int
	for _, line := range lines[1 : len(lines)-1] {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Errorf("malformed line %q", line)
			continue
		}
		attempts++
		name, errno := f[0], f[1]
		want := "1" // EPERM: the filter's answer
		switch {
		case name == "socket_unix":
			want = "0" // allowed
		case noIA32 && strings.HasPrefix(name, "int80_"):
			want = "-11"
		case strings.HasPrefix(name, "x32_") && isolationName == "seccomp":
			// x32 is not in the profile: runc's filter kills it as a bad
			// architecture. gVisor ignores architectures (EPERM).
			want = "-31"
		case name == "clone3" && isolationName == "seccomp":
			want = "38" // ENOSYS, so that libc falls back to clone
		case name == "clone3":
			// gVisor serves clone3 itself (see seccomp.ForGVisor); the
			// probe's arguments are invalid.
			if errno == "0" {
				t.Errorf("clone3 with invalid arguments succeeded")
			}
			continue
		}
		if errno != want {
			t.Errorf("%s: errno %s (%s), want %s", name, errno, f[2], want)
		}
	}
	if attempts < 50 {
		t.Errorf("only %d attempts:\n%s", attempts, out)
	}
	t.Logf("%d attempts, each answered as the profile says", attempts)
}

// Real programs still run under the profile: what dify-sandbox's profile
// broke (numpy's import) among them.
func TestSeccompAllowsRealPrograms(t *testing.T) {
	res, _ := runJSON(t, nil, "--timeout", "120s", "--", "python3", "-c", `
import numpy, json, sqlite3, multiprocessing, subprocess, concurrent.futures
import matplotlib.pyplot as plt
print(json.dumps(numpy.linalg.inv(numpy.eye(3) * 2).sum()))
print(sqlite3.connect(":memory:").execute("select 6 * 7").fetchone()[0])
with multiprocessing.Pool(2) as p:
    print(sum(p.map(abs, [-1, -2, -3])))
with concurrent.futures.ThreadPoolExecutor(4) as ex:
    print(sum(ex.map(lambda x: x * x, range(10))))
print(subprocess.run(["ls", "/"], check=True, capture_output=True).stdout.split().count(b"usr"))
plt.plot([1, 2, 3]); plt.savefig("/tmp/plot.png"); print("png", open("/tmp/plot.png", "rb").read(4) == b"\x89PNG")
`)
	if res.Reason != runner.ReasonExited || string(res.Stdout.Head) != "1.5\n42\n6\n285\n1\npng True\n" {
		t.Errorf("reason %s exit %d stdout %q stderr %s", res.Reason, res.ExitCode, res.Stdout.Head, res.Stderr.Head)
	}
}

func TestBadSeccompProfilesAreRefused(t *testing.T) {
	dir := t.TempDir()
	unknown := filepath.Join(dir, "unknown.json")
	os.WriteFile(unknown, []byte(`{"defaultAction":"SCMP_ACT_ERRNO","architectures":["SCMP_ARCH_X86_64"],"syscalls":[{"names":["read","no_such_syscall"],"action":"SCMP_ACT_ALLOW"}]}`), 0o644)
	garbage := filepath.Join(dir, "garbage.json")
	os.WriteFile(garbage, []byte(`{"defaultAction":`), 0o644)
	runs := filepath.Join(rootDir, "runs")
	os.MkdirAll(runs, 0o700)
	before, _ := os.Stat(runs)
	for _, tc := range []struct {
		file, want string
		code       int
	}{
		{unknown, "no_such_syscall", 64},
		{garbage, "seccomp profile", 64},
		{filepath.Join(dir, "missing.json"), "no such file", 66},
	} {
		c := airlock(nil, "run", "--image", busybox, "--seccomp-profile", tc.file, "--", "true")
		if c.code != tc.code || !strings.Contains(c.stderr, tc.want) {
			t.Errorf("%s: exit %d stderr %q; want %d mentioning %q", filepath.Base(tc.file), c.code, c.stderr, tc.code, tc.want)
		}
	}
	if after, _ := os.Stat(runs); !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("a run was started with a bad profile")
	}
}

// Without cgo there is no libseccomp: the seccomp mode refuses to run
// rather than run unfiltered.
func TestSeccompModeNeedsCgo(t *testing.T) {
	// Refused before any engine is asked.
	onlyPair(t, "oci", "seccomp")
	bin := filepath.Join(t.TempDir(), "airlock-nocgo")
	build := exec.Command("go", "build", "-o", bin, "../cmd/airlock")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building without cgo: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--root", rootDir, "run", "--engine", engineName, "--isolation", "seccomp", "--image", busybox, "--", "true").CombinedOutput()
	ee, _ := err.(*exec.ExitError)
	if ee == nil || ee.ExitCode() != 69 || !strings.Contains(string(out), "cgo") {
		t.Errorf("seccomp mode without cgo: %v %s", err, out)
	}
	noSandboxLeft(t)
}

// A custom profile may only take calls away from the default: one that
// allows everything is refused before anything runs, and one that denies
// mkdir as well runs, with mkdir answered EPERM.
func TestCustomSeccompProfileOnlyNarrows(t *testing.T) {
	dir := t.TempDir()
	allowAll := filepath.Join(dir, "allow-all.json")
	os.WriteFile(allowAll, []byte(`{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86_64","SCMP_ARCH_X86","SCMP_ARCH_X32"],"syscalls":[]}`), 0o644)
	runs := filepath.Join(rootDir, "runs")
	os.MkdirAll(runs, 0o700)
	before, _ := os.Stat(runs)
	c := airlock(nil, "run", "--image", busybox, "--seccomp-profile", allowAll, "--", "true")
	if c.code != 64 || !strings.Contains(c.stderr, "allows what airlock's default denies") || !strings.Contains(c.stderr, "unshare") {
		t.Errorf("allow-all profile: exit %d stderr %q; want 64 naming unshare", c.code, c.stderr)
	}
	if after, _ := os.Stat(runs); !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("a run was started with a widening profile")
	}

	var doc map[string]any
	raw, err := fs.ReadFile(seccompprofiles.FS, "default.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var kept []any
	for _, g := range doc["syscalls"].([]any) {
		rule := g.(map[string]any)
		names := slices.DeleteFunc(rule["names"].([]any), func(n any) bool { return n == "mkdir" || n == "mkdirat" })
		if len(names) > 0 {
			rule["names"] = names
			kept = append(kept, rule)
		}
	}
	doc["syscalls"] = kept
	b, _ := json.Marshal(doc)
	noMkdir := filepath.Join(dir, "no-mkdir.json")
	os.WriteFile(noMkdir, b, 0o644)
	res, _ := runJSON(t, nil, "--image", busybox, "--seccomp-profile", noMkdir, "--", "sh", "-c", "echo ok; mkdir /tmp/d")
	if res.Reason != runner.ReasonExited || res.ExitCode == 0 || string(res.Stdout.Head) != "ok\n" || !strings.Contains(string(res.Stderr.Head), "Operation not permitted") {
		t.Errorf("no-mkdir profile: reason %s exit %d stdout %q stderr %q; want mkdir to fail with EPERM", res.Reason, res.ExitCode, res.Stdout.Head, res.Stderr.Head)
	}
	noSandboxLeft(t)
}
