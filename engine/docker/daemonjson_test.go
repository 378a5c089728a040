package docker

import (
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func TestRegisterRuntimeMerges(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "daemon.json")
	orig := `{"log-level":"warn","runtimes":{"other":{"path":"/usr/bin/other"}},"features":{"buildkit":true}}`
	if err := os.WriteFile(p, []byte(orig), 0o600); err != nil {
		t.Fatal(err)
	}
	rt := Runtime{Path: "/var/lib/airlock/tools/runsc", RuntimeArgs: []string{"--network=none"}}
	changed, backup, err := RegisterRuntime(p, "airlock-runsc", rt, false)
	if err != nil || !changed || backup == "" {
		t.Fatalf("RegisterRuntime = %v, %q, %v", changed, backup, err)
	}
	if b, _ := os.ReadFile(backup); string(b) != orig {
		t.Errorf("backup holds %q", b)
	}
	var got struct {
		LogLevel string                     `json:"log-level"`
		Features map[string]bool            `json:"features"`
		Runtimes map[string]json.RawMessage `json:"runtimes"`
	}
	b, _ := os.ReadFile(p)
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.LogLevel != "warn" || !got.Features["buildkit"] || len(got.Runtimes) != 2 {
		t.Errorf("other keys lost: %s", b)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode changed to %v", fi.Mode())
	}

	// Idempotent: a second call changes nothing and makes no backup.
	changed, backup, err = RegisterRuntime(p, "airlock-runsc", rt, false)
	if err != nil || changed || backup != "" {
		t.Fatalf("second RegisterRuntime = %v, %q, %v", changed, backup, err)
	}
}

func TestRegisterRuntimeNewFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "docker", "daemon.json")
	changed, backup, err := RegisterRuntime(p, "rt", Runtime{Path: "/x"}, false)
	if err != nil || !changed || backup != "" {
		t.Fatalf("RegisterRuntime = %v, %q, %v", changed, backup, err)
	}
	b, _ := os.ReadFile(p)
	if string(b) != "{\n  \"runtimes\": {\n    \"rt\": {\n      \"path\": \"/x\"\n    }\n  }\n}\n" {
		t.Errorf("wrote %q", b)
	}
}

func TestRegisterRuntimeRefusesBadJSON(t *testing.T) {
	for _, content := range []string{`{"runtimes": [1,2]}`, `not json`, `[1]`} {
		p := filepath.Join(t.TempDir(), "daemon.json")
		os.WriteFile(p, []byte(content), 0o644)
		_, _, err := RegisterRuntime(p, "rt", Runtime{Path: "/x"}, false)
		if !errdefs.IsInvalidArgument(err) {
			t.Errorf("%s: err = %v", content, err)
		}
		if b, _ := os.ReadFile(p); string(b) != content {
			t.Errorf("%s: file changed to %q", content, b)
		}
		if ents, _ := os.ReadDir(filepath.Dir(p)); len(ents) != 1 {
			t.Errorf("%s: stray files %v", content, ents)
		}
	}
}

func TestMissingRunscArgs(t *testing.T) {
	for _, tc := range []struct {
		args, missing []string
	}{
		{[]string{"--network=none", "--oci-seccomp", "--debug-log=/x/%ID%/"}, nil},
		{[]string{"--network=none", "--oci-seccomp=true"}, nil},
		{[]string{"--network=none"}, []string{"--oci-seccomp"}},
		{nil, []string{"--network=none", "--oci-seccomp"}},
		{[]string{"--network=host", "--oci-seccomp=false"}, []string{"--network=none", "--oci-seccomp"}},
		{[]string{"--network=none", "--oci-seccomp", "--oci-seccomp=false", "-network=host"}, []string{"--network=none", "--oci-seccomp"}},
	} {
		if got := MissingRunscArgs(tc.args); !slices.Equal(got, tc.missing) {
			t.Errorf("%q: missing %q, want %q", tc.args, got, tc.missing)
		}
	}
}

func TestRegisterRuntimeKeepsAnotherRunsc(t *testing.T) {
	p := filepath.Join(t.TempDir(), "daemon.json")
	theirs := Runtime{Path: "/var/lib/airlock/tools/runsc", RuntimeArgs: []string{"--network=none"}}
	if _, _, err := RegisterRuntime(p, "airlock-runsc", theirs, false); err != nil {
		t.Fatal(err)
	}
	orig, _ := os.ReadFile(p)
	ours := Runtime{Path: "/srv/other/tools/runsc", RuntimeArgs: []string{"--network=none"}}
	// A check refuses the same way, and so does nothing; one that would
	// write says so, and writes nothing either.
	if changed, err := CheckRuntime(p, "airlock-runsc", ours, false); !errdefs.IsAlreadyExists(err) || changed {
		t.Errorf("CheckRuntime of another runsc's entry = %v, %v; want an already-exists refusal", changed, err)
	}
	if changed, err := CheckRuntime(p, "airlock-runsc", theirs, false); err != nil || changed {
		t.Errorf("CheckRuntime of the entry as it is = %v, %v; want unchanged", changed, err)
	}
	if changed, err := CheckRuntime(p, "airlock-runsc", ours, true); err != nil || !changed {
		t.Errorf("CheckRuntime with replace = %v, %v; want changed", changed, err)
	}
	if b, _ := os.ReadFile(p); string(b) != string(orig) {
		t.Errorf("a check changed the file to %s", b)
	}
	changed, backup, err := RegisterRuntime(p, "airlock-runsc", ours, false)
	if !errdefs.IsAlreadyExists(err) || changed || backup != "" {
		t.Fatalf("re-pointing another runsc's entry = %v, %q, %v; want an already-exists refusal", changed, backup, err)
	}
	for _, want := range []string{theirs.Path, ours.Path, "--name", "--replace"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not name %q: %v", want, err)
		}
	}
	if b, _ := os.ReadFile(p); string(b) != string(orig) {
		t.Errorf("a refusal changed the file to %s", b)
	}
	// New flags for the same runsc are an update, not a takeover.
	theirs.RuntimeArgs = append(theirs.RuntimeArgs, "--oci-seccomp")
	if changed, _, err := RegisterRuntime(p, "airlock-runsc", theirs, false); err != nil || !changed {
		t.Errorf("updating the flags of the same runsc = %v, %v", changed, err)
	}
	// --replace re-points it.
	if changed, _, err := RegisterRuntime(p, "airlock-runsc", ours, true); err != nil || !changed {
		t.Errorf("replace = %v, %v", changed, err)
	}
}

func TestPrivateLogs(t *testing.T) {
	root := t.TempDir()
	e := &Engine{log: slog.New(slog.DiscardHandler)}
	dir := filepath.Join(root, "sandbox-logs")
	e.privateLogs(dir + "/%ID%/")
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("created %s: %v, %v; want mode 0700", dir, fi, err)
	}
	// One runsc made world-readable is narrowed.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e.privateLogs(dir + "/%ID%/")
	if fi, _ := os.Stat(dir); fi.Mode().Perm() != 0o700 {
		t.Errorf("mode %v after privateLogs, want 0700", fi.Mode())
	}
	// Not airlock's layout: left alone.
	other := filepath.Join(root, "other")
	e.privateLogs(other + "/logs/")
	if _, err := os.Stat(other); err == nil {
		t.Errorf("created %s for a pattern without %%ID%%", other)
	}
}
