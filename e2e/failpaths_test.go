//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/runner"
)

// breakAudit makes the tests' audit log a directory, so airlock can append
// nothing to it, until the test ends.
func breakAudit(t *testing.T) string {
	t.Helper()
	audit := filepath.Join(rootDir, "audit.jsonl")
	saved := audit + ".saved"
	if err := os.Rename(audit, saved); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	if err := os.Mkdir(audit, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.Remove(audit)
		os.Rename(saved, audit)
	})
	return audit
}

// runLeftovers lists the state files and run directories under root.
func runLeftovers(root string) []string {
	states, _ := filepath.Glob(filepath.Join(root, "state", "*.json"))
	runs, _ := filepath.Glob(filepath.Join(root, "runs", "*"))
	return append(states, runs...)
}

func wantAuditFailure(t *testing.T, audit string, res runner.Result, code int, stderr string) {
	t.Helper()
	if code != 69 || res.Reason != runner.ReasonError || res.ErrorKind != "unavailable" || !strings.Contains(res.Error, audit) || !strings.Contains(stderr, audit) {
		t.Errorf("exit %d, result %s/%s %q, stderr %q; want exit 69, unavailable, naming %s", code, res.Reason, res.ErrorKind, res.Error, stderr, audit)
	}
	if res.Receipt != nil {
		t.Error("a run whose audit event was lost still has a receipt")
	}
	if left := runLeftovers(rootDir); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	noSandboxLeft(t)
}

func TestAuditLogUnwritableFailsBeforeStart(t *testing.T) {
	audit := breakAudit(t)
	res, c := runJSON(t, nil, "--image", busybox, "--", "echo", "ran")
	if res.ExitCode != -1 || res.ID != "" {
		t.Errorf("the program ran (exit %d, run %q)", res.ExitCode, res.ID)
	}
	wantAuditFailure(t, audit, res, c.code, c.stderr)
}

func TestAuditLogLostMidRunFailsTheRun(t *testing.T) {
	cmd := exec.Command(airlockBin, "--root", rootDir, "run", "--engine", engineName, "--isolation", isolationName,
		"--json", "--image", busybox, "--", "sh", "-c", "sleep 2; echo done")
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Once the program runs, its events can no longer be written.
	deadline := time.Now().Add(30 * time.Second)
	for !anyRunning() {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the run never got to running; stderr: %s", se.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	audit := breakAudit(t)
	cmd.Wait()
	var res runner.Result
	if err := json.Unmarshal(so.Bytes(), &res); err != nil {
		t.Fatalf("stdout is not one result (%v): %q; stderr %s", err, so.String(), se.String())
	}
	if res.ExitCode != 0 {
		t.Errorf("program exit %d; it ran to its end", res.ExitCode)
	}
	wantAuditFailure(t, audit, res, cmd.ProcessState.ExitCode(), se.String())
}

// anyRunning reports whether a run under the tests' root is running.
func anyRunning() bool {
	states, _ := filepath.Glob(filepath.Join(rootDir, "state", "*.json"))
	for _, s := range states {
		if b, _ := os.ReadFile(s); bytes.Contains(b, []byte(`"state":"running"`)) {
			return true
		}
	}
	return false
}

// A runtime whose version cannot be read fails the run before anything is
// created: receipts never say "unknown". The broken runtime is a wrapper
// that refuses --version and runs the real one otherwise, in an airlock
// root of the test's own, so this checks the oci engine (the one whose
// runtime binary a test can swap) whatever engine the suite runs.
func TestRuntimeVersionUnreadableFailsTheRun(t *testing.T) {
	root := t.TempDir()
	t.Cleanup(func() {
		// Should a run start, runsc binds its empty netns here.
		for syscall.Unmount(filepath.Join(root, "oci", "runsc", "null-netns"), syscall.MNT_DETACH) == nil {
		}
	})
	realRunsc, err := filepath.EvalSymlinks(filepath.Join(rootDir, "tools", "runsc"))
	if err != nil {
		t.Fatal(err)
	}
	realRunc, err := exec.LookPath("runc")
	if err != nil {
		t.Fatal(err)
	}
	wrapper := func(real string) []byte {
		return []byte("#!/bin/sh\nfor a; do [ \"$a\" = --version ] && { echo 'version: no such thing' >&2; exit 1; }; done\nexec " + real + " \"$@\"\n")
	}
	bin := filepath.Join(root, "bin")
	for dir, f := range map[string]string{filepath.Join(root, "tools"): realRunsc, bin: realRunc} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), wrapper(f), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(rootDir, "store"), filepath.Join(root, "store")); err != nil {
		t.Fatal(err)
	}
	name := map[string]string{"gvisor": "runsc", "seccomp": "runc"}[isolationName]
	cmd := exec.Command(airlockBin, "--root", root, "run", "--engine", "oci", "--isolation", isolationName, "--json", "--image", busybox, "--", "echo", "ran")
	cmd.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"))
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	cmd.Run()
	var res runner.Result
	if err := json.Unmarshal(so.Bytes(), &res); err != nil {
		t.Fatalf("stdout is not one result (%v): %q; stderr %s", err, so.String(), se.String())
	}
	code := cmd.ProcessState.ExitCode()
	want := "cannot read " + name + "'s version"
	if code != 69 || res.ErrorKind != "unavailable" || !strings.Contains(res.Error, want) || !strings.Contains(res.Error, "no such thing") || !strings.Contains(res.Error, "make setup") {
		t.Errorf("exit %d, %s %q; want exit 69, unavailable, %q with runsc's own words and the fix", code, res.ErrorKind, res.Error, want)
	}
	if res.ID != "" || res.Receipt != nil {
		t.Errorf("run %q started (receipt %v)", res.ID, res.Receipt != nil)
	}
	left := runLeftovers(root)
	bundles, _ := filepath.Glob(filepath.Join(root, "oci", "bundles", "*"))
	if left = append(left, bundles...); len(left) > 0 {
		t.Errorf("left behind: %v", left)
	}
	noSandboxLeft(t)
}
