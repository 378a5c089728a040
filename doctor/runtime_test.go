package doctor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRuntimeCheck(t *testing.T) {
	dir := t.TempDir()
	runsc := filepath.Join(dir, "root", "tools", "runsc")
	other := filepath.Join(dir, "other", "tools", "runsc")
	for _, p := range []string{runsc, other} {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	notExec := filepath.Join(dir, "root", "tools", "plain")
	os.WriteFile(notExec, nil, 0o644)
	args := []string{"--network=none", "--oci-seccomp", "--debug-log=/r/sandbox-logs/%ID%/", "--debug-command=boot"}
	o := Options{Root: "/r", RuntimeOwner: "/r", RuntimeRunsc: runsc, RuntimeArgs: args}
	gone := filepath.Join(dir, "gone", "runsc")
	// dockerd runs it as root: one anyone may rewrite is refused.
	writable := filepath.Join(dir, "writable", "tools", "runsc")
	writeRunsc(t, writable, 0o777)
	for _, tc := range []struct {
		name   string
		o      Options
		e      RuntimeEntry
		status string
		says   []string
	}{
		{"ok", o, RuntimeEntry{Name: "rt", Found: true, Path: runsc, Args: args}, StatusOK, []string{`"rt"`, runsc}},
		{"not registered", o, RuntimeEntry{Name: "rt"}, StatusFail, []string{`no runtime "rt"`}},
		{"another root's runsc", o, RuntimeEntry{Name: "rt", Found: true, Path: other, Args: args}, StatusFail, []string{other, runsc, "another installation"}},
		{"another root's runsc, gone", o, RuntimeEntry{Name: "rt", Found: true, Path: gone, Args: args}, StatusFail, []string{gone, runsc}},
		{"this root's runsc, gone", Options{Root: "/r", RuntimeOwner: "/r", RuntimeRunsc: gone, RuntimeArgs: args},
			RuntimeEntry{Name: "rt", Found: true, Path: gone, Args: args}, StatusFail, []string{gone, "does not exist"}},
		{"not executable", Options{Root: "/r", RuntimeOwner: "/r", RuntimeRunsc: notExec, RuntimeArgs: args},
			RuntimeEntry{Name: "rt", Found: true, Path: notExec, Args: args}, StatusFail, []string{notExec, "not an executable"}},
		{"anyone may rewrite it", Options{Root: "/r", RuntimeOwner: "/r", RuntimeRunsc: writable, RuntimeArgs: args},
			RuntimeEntry{Name: "rt", Found: true, Path: writable, Args: args}, StatusFail, []string{writable, "0777", "as root"}},
		{"flags differ", o, RuntimeEntry{Name: "rt", Found: true, Path: runsc, Args: append(args[:3:3], "--network=host")}, StatusFail, []string{"--network=host", "not the ones airlock writes"}},
		{"a flag more", o, RuntimeEntry{Name: "rt", Found: true, Path: runsc, Args: append(args[:4:4], "--network=host")}, StatusFail, []string{"--network=host"}},
		{"shared with the default root", Options{Root: "/s", RuntimeOwner: "/r", RuntimeRunsc: runsc, RuntimeArgs: args},
			RuntimeEntry{Name: "rt", Found: true, Path: runsc, Args: args}, StatusOK, []string{"the default root's"}},
	} {
		c := runtimeCheck(true, tc.e, tc.o, "")
		if c.Status != tc.status {
			t.Errorf("%s: %+v, want %s", tc.name, c, tc.status)
		}
		for _, s := range tc.says {
			if !strings.Contains(c.Detail, s) {
				t.Errorf("%s: detail %q does not say %q", tc.name, c.Detail, s)
			}
		}
		if c.Status == StatusFail && c.Fix == "" {
			t.Errorf("%s: a FAIL with no fix", tc.name)
		}
		if w := runtimeCheck(false, tc.e, tc.o, " (only)"); tc.status == StatusFail && w.Status != StatusWarn {
			t.Errorf("%s, not needed: %s, want warn", tc.name, w.Status)
		}
	}
}

// A record of the runtime name that cannot be read is the docker runtime
// row's FAIL, with its fix; dockerd's row, which no engine could check,
// points there.
func TestRuntimeRecordDamaged(t *testing.T) {
	damaged := errors.New("/r/docker-runtime: runtime name \"../x\": use up to 64 letters")
	for _, engine := range []string{"docker", "oci"} {
		o := Options{Root: "/r", Runsc: "/r/tools/runsc", Engine: engine, Isolation: "seccomp", RuntimeRecordErr: damaged}
		c := checkDockerRuntime(context.Background(), o)
		want := StatusFail
		if engine == "oci" {
			want = StatusWarn
		}
		if c.Status != want || !strings.Contains(c.Detail, "docker-runtime") || !strings.Contains(c.Fix, "--name NAME") {
			t.Errorf("engine %s: %+v; want %s naming the record, and a fix", engine, c, want)
		}
		if d := checkDockerd(context.Background(), o); d.Status == StatusOK || !strings.Contains(d.Detail, "docker runtime row") {
			t.Errorf("engine %s: dockerd row %+v", engine, d)
		}
	}
}
