package docker

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
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
	changed, backup, err := RegisterRuntime(p, "airlock-runsc", rt)
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
	changed, backup, err = RegisterRuntime(p, "airlock-runsc", rt)
	if err != nil || changed || backup != "" {
		t.Fatalf("second RegisterRuntime = %v, %q, %v", changed, backup, err)
	}
}

func TestRegisterRuntimeNewFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "docker", "daemon.json")
	changed, backup, err := RegisterRuntime(p, "rt", Runtime{Path: "/x"})
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
		_, _, err := RegisterRuntime(p, "rt", Runtime{Path: "/x"})
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
