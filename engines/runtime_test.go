package engines

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/doctor"
	"github.com/airlock-sandbox/airlock/internal/roottest"
	"github.com/airlock-sandbox/airlock/runner"
)

func TestRuntimeNames(t *testing.T) {
	if got, err := RuntimeName(runner.DefaultRoot + "/"); err != nil || (got != DefaultRuntime && !recorded(runner.DefaultRoot)) {
		t.Errorf("the default root registers %q (%v), want %q", got, err, DefaultRuntime)
	}
	a, b := t.TempDir(), t.TempDir()
	na, _ := RuntimeName(a)
	nb, _ := RuntimeName(b)
	if !strings.HasPrefix(na, DefaultRuntime+"-") || na == nb || CheckRuntimeName(na) != nil {
		t.Errorf("roots %s and %s register %q and %q: want distinct valid names of their own", a, b, na, nb)
	}
	if again, _ := RuntimeName(a + "/."); again != na {
		t.Errorf("the name of %s/. is %q, of %s %q", a, again, a, na)
	}
	// Until it registers one, a root's engine uses the default root's.
	if got, err := engineRuntime(a); err != nil || got != DefaultRuntime {
		t.Errorf("engineRuntime of a root with no record = %q, %v", got, err)
	}
	runsc := filepath.Join(a, "runsc")
	if err := os.WriteFile(runsc, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	daemon := filepath.Join(b, "daemon.json")
	// A check writes nothing: no daemon.json, no record, no log directory.
	if got, err := InstallRuntime(a, Install{Runsc: runsc, Name: "mine", DaemonJSON: daemon, Check: true}); err != nil || !got.Changed || got.Name != "mine" {
		t.Fatalf("InstallRuntime with Check = %+v, %v; want changed, writing nothing", got, err)
	}
	for _, p := range []string{daemon, filepath.Join(a, RuntimeRecord), filepath.Join(a, "sandbox-logs")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("a check made %s", p)
		}
	}
	got, err := InstallRuntime(a, Install{Runsc: runsc, Name: "mine", DaemonJSON: daemon})
	if err != nil || got.Name != "mine" || !got.Changed || got.Runsc != runsc {
		t.Fatalf("InstallRuntime = %+v, %v", got, err)
	}
	for _, f := range []func(string) (string, error){RuntimeName, engineRuntime} {
		if got, err := f(a); err != nil || got != "mine" {
			t.Errorf("after recording: %q, %v", got, err)
		}
	}
	if fi, _ := os.Stat(filepath.Join(a, RuntimeRecord)); fi.Mode().Perm() != 0o600 {
		t.Errorf("the record has mode %v", fi.Mode())
	}
	if fi, _ := os.Stat(filepath.Join(a, "sandbox-logs")); fi == nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("sandbox-logs: %v, want a directory of mode 0700", fi)
	}
	if b, _ := os.ReadFile(daemon); !strings.Contains(string(b), `"mine"`) || !strings.Contains(string(b), runsc) {
		t.Errorf("daemon.json holds %s", b)
	}
	if again, err := InstallRuntime(a, Install{Runsc: runsc, DaemonJSON: daemon}); err != nil || again.Changed || again.Name != "mine" {
		t.Errorf("installing again = %+v, %v; want the recorded name, unchanged", again, err)
	}
	// A bad record is an error, never a silent fallback.
	os.WriteFile(filepath.Join(a, RuntimeRecord), []byte("../x\n"), 0o600)
	if _, err := engineRuntime(a); err == nil || !strings.Contains(err.Error(), RuntimeRecord) {
		t.Errorf("a bad record: %v", err)
	}
	for _, bad := range []string{"", "-x", "a b", "a/b", strings.Repeat("x", 65)} {
		if CheckRuntimeName(bad) == nil {
			t.Errorf("runtime name %q accepted", bad)
		}
		if _, err := InstallRuntime(a, Install{Runsc: runsc, Name: bad, DaemonJSON: daemon}); err == nil {
			t.Errorf("InstallRuntime took the name %q", bad)
		}
	}
	if _, err := InstallRuntime(a, Install{Runsc: filepath.Join(a, "none"), DaemonJSON: daemon}); err == nil || !strings.Contains(err.Error(), "make setup") {
		t.Errorf("a missing runsc: %v", err)
	}
}

func recorded(root string) bool {
	_, ok, _ := recordedRuntime(root)
	return ok
}

// fakeRunsc makes an executable runsc in dir, then gives it mode.
func fakeRunsc(t *testing.T, dir string, mode os.FileMode) string {
	t.Helper()
	p := filepath.Join(dir, "runsc")
	if err := os.WriteFile(p, []byte("#!/bin/sh\necho runsc version test\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
	return p
}

// dockerd runs the registered runsc as root for every container: one
// another user can rewrite, or replace in a directory they may write, is
// refused, by a check as by a registration, naming what to fix.
func TestInstallRuntimeRefusesRunscOthersCanChange(t *testing.T) {
	dir := t.TempDir()
	daemon := filepath.Join(dir, "daemon.json")
	shared := filepath.Join(dir, "shared")
	if err := os.Mkdir(shared, 0o755); err != nil {
		t.Fatal(err)
	}
	inShared := fakeRunsc(t, shared, 0o755)
	if err := os.Chmod(shared, 0o777); err != nil { // no sticky bit: anyone may rename over runsc
		t.Fatal(err)
	}
	for _, tc := range []struct{ runsc, says string }{
		{fakeRunsc(t, t.TempDir(), 0o777), "0777"},
		{fakeRunsc(t, t.TempDir(), 0o775), "0775"},
		{inShared, shared},
	} {
		for _, check := range []bool{true, false} {
			_, err := InstallRuntime(filepath.Join(dir, "root"), Install{Runsc: tc.runsc, DaemonJSON: daemon, Check: check})
			if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "chmod go-w") {
				t.Errorf("runsc %s (check %v): %v; want a refusal naming %s and the fix", tc.runsc, check, err, tc.says)
			}
		}
	}
	if _, err := os.Stat(daemon); err == nil {
		t.Errorf("a refusal wrote %s", daemon)
	}
}

func TestInstallRuntimeRefusesRunscOfAnotherUser(t *testing.T) {
	roottest.Require(t, "chown")
	runsc := fakeRunsc(t, t.TempDir(), 0o755)
	if err := os.Chown(runsc, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	_, err := InstallRuntime(filepath.Join(dir, "root"), Install{Runsc: runsc, DaemonJSON: filepath.Join(dir, "daemon.json"), Check: true})
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "uid 1000") {
		t.Errorf("runsc owned by uid 1000: %v; want a refusal naming the owner", err)
	}
}

// Two roots given the same runsc and --name: the second would re-point
// the first's --debug-log at its own directory, and the first's `airlock
// doctor` would then fail "flags differ". It is refused.
func TestInstallRuntimeKeepsAnotherRootsEntry(t *testing.T) {
	dir := t.TempDir()
	runsc := fakeRunsc(t, dir, 0o755)
	daemon := filepath.Join(dir, "daemon.json")
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	if _, err := InstallRuntime(a, Install{Runsc: runsc, Name: "shared", DaemonJSON: daemon}); err != nil {
		t.Fatal(err)
	}
	orig, _ := os.ReadFile(daemon)
	got, err := InstallRuntime(b, Install{Runsc: runsc, Name: "shared", DaemonJSON: daemon})
	if !errdefs.IsAlreadyExists(err) || got.Changed {
		t.Errorf("root %s took root %s's runtime %q: %+v, %v; want an already-exists refusal", b, a, "shared", got, err)
	}
	if raw, _ := os.ReadFile(daemon); string(raw) != string(orig) {
		t.Errorf("a refusal changed daemon.json to %s", raw)
	}
	if _, err := os.Stat(filepath.Join(b, RuntimeRecord)); err == nil {
		t.Errorf("a refusal recorded the name in %s", b)
	}
}

// A damaged record is the doctor's docker runtime row to report, not an
// error that keeps the report from being made.
func TestDoctorDamagedRecord(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, RuntimeRecord), []byte("../x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var o doctor.Options
	done, err := New(root).Doctor(&o)
	if err != nil {
		t.Fatalf("Doctor: %v", err)
	}
	done()
	if o.RuntimeRecordErr == nil || !strings.Contains(o.RuntimeRecordErr.Error(), RuntimeRecord) || o.Root != root {
		t.Errorf("Doctor filled in %+v; want the record's error", o)
	}
}
