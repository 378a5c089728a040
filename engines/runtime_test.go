package engines

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
