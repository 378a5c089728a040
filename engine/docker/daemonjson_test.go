package docker

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/internal/roottest"
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

// A file airlock cannot merge into as dockerd reads it is refused, by a
// check as by a registration, and left as it was. A key given twice is
// one: dockerd merges two "runtimes" objects, a rewrite would keep one.
func TestRegisterRuntimeRefusesBadJSON(t *testing.T) {
	for _, content := range []string{`{"runtimes": [1,2]}`, `not json`, `[1]`, "null\n",
		`{"runtimes":{"nvidia":{"path":"/usr/bin/nvidia-container-runtime"}},"runtimes":{"kata":{"path":"/usr/bin/kata-runtime"}}}`,
		`{"runtimes":{"kata":{"path":"/a"},"kata":{"path":"/b"}}}`,
	} {
		p := filepath.Join(t.TempDir(), "daemon.json")
		os.WriteFile(p, []byte(content), 0o644)
		if _, err := CheckRuntime(p, "rt", Runtime{Path: "/x"}, false); !errdefs.IsInvalidArgument(err) {
			t.Errorf("%s: check: err = %v", content, err)
		}
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

// "runtimes": null is no runtimes, as dockerd reads it: merged into.
func TestRegisterRuntimeNullRuntimes(t *testing.T) {
	p := filepath.Join(t.TempDir(), "daemon.json")
	if err := os.WriteFile(p, []byte(`{"log-level":"warn","runtimes":null}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, err := CheckRuntime(p, "rt", Runtime{Path: "/x"}, false); err != nil || !changed {
		t.Fatalf("CheckRuntime = %v, %v", changed, err)
	}
	if changed, _, err := RegisterRuntime(p, "rt", Runtime{Path: "/x"}, false); err != nil || !changed {
		t.Fatalf("RegisterRuntime = %v, %v", changed, err)
	}
	var got struct {
		LogLevel string             `json:"log-level"`
		Runtimes map[string]Runtime `json:"runtimes"`
	}
	b, _ := os.ReadFile(p)
	if err := json.Unmarshal(b, &got); err != nil || got.LogLevel != "warn" || got.Runtimes["rt"].Path != "/x" {
		t.Errorf("wrote %s (%v)", b, err)
	}
}

// A daemon.json that is a symlink (into a managed configuration) is
// refused, naming the file it links to: renaming over it would turn it
// into a file of its own, which that configuration no longer governs.
func TestRegisterRuntimeRefusesSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "managed", "daemon.json")
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		t.Fatal(err)
	}
	const orig = `{"log-level":"warn"}`
	if err := os.WriteFile(target, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "daemon.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := CheckRuntime(link, "rt", Runtime{Path: "/x"}, false); !errdefs.IsInvalidArgument(err) {
		t.Errorf("CheckRuntime = %v; want an invalid-argument refusal", err)
	}
	_, _, err := RegisterRuntime(link, "rt", Runtime{Path: "/x"}, false)
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "--daemon-json "+target) {
		t.Errorf("RegisterRuntime = %v; want a refusal naming --daemon-json %s", err, target)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("%s is no longer a symlink: %v, %v", link, fi, err)
	}
	if b, _ := os.ReadFile(target); string(b) != orig {
		t.Errorf("%s changed to %s", target, b)
	}
}

// The new file keeps the old one's owner and group, as its mode.
func TestRegisterRuntimeKeepsOwner(t *testing.T) {
	roottest.Require(t, "chown")
	p := filepath.Join(t.TempDir(), "daemon.json")
	if err := os.WriteFile(p, []byte(`{"log-level":"warn"}`), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(p, 0, 4321); err != nil {
		t.Fatal(err)
	}
	if _, _, err := RegisterRuntime(p, "rt", Runtime{Path: "/x"}, false); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if st := fi.Sys().(*syscall.Stat_t); st.Uid != 0 || st.Gid != 4321 || fi.Mode().Perm() != 0o640 {
		t.Errorf("owner %d:%d mode %v; want 0:4321 and 0640 kept", st.Uid, st.Gid, fi.Mode().Perm())
	}
}

// Registrations at once (install.sh for two roots, make setup beside an
// install) each land: none reads the file before another's write and
// then writes over it.
func TestRegisterRuntimeConcurrent(t *testing.T) {
	for round := 0; round < 20; round++ {
		p := filepath.Join(t.TempDir(), "daemon.json")
		if err := os.WriteFile(p, []byte(`{"log-level":"warn"}`), 0o644); err != nil {
			t.Fatal(err)
		}
		const n = 6
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i := range n {
			wg.Go(func() {
				_, _, errs[i] = RegisterRuntime(p, fmt.Sprintf("rt%d", i), Runtime{Path: fmt.Sprintf("/runsc%d", i)}, false)
			})
		}
		wg.Wait()
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var got struct {
			Runtimes map[string]Runtime `json:"runtimes"`
		}
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("round %d: daemon.json corrupt: %v: %s", round, err, b)
		}
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d: rt%d: %v", round, i, errs[i])
			}
			if _, ok := got.Runtimes[fmt.Sprintf("rt%d", i)]; !ok {
				t.Fatalf("round %d: rt%d was registered, but daemon.json lost it: %s", round, i, b)
			}
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

// The same runsc logging its sandboxes under another root is that root's
// entry: refused, as another runsc's is, unless replace is set.
func TestRegisterRuntimeKeepsAnotherRootsLogs(t *testing.T) {
	p := filepath.Join(t.TempDir(), "daemon.json")
	const runsc = "/opt/runsc"
	theirs := Runtime{Path: runsc, RuntimeArgs: []string{"--network=none", "--debug-log=/srv/a/sandbox-logs/%ID%/"}}
	if _, _, err := RegisterRuntime(p, "shared", theirs, false); err != nil {
		t.Fatal(err)
	}
	orig, _ := os.ReadFile(p)
	ours := Runtime{Path: runsc, RuntimeArgs: []string{"--network=none", "--debug-log=/srv/b/sandbox-logs/%ID%/"}}
	if changed, err := CheckRuntime(p, "shared", ours, false); !errdefs.IsAlreadyExists(err) || changed {
		t.Errorf("CheckRuntime = %v, %v; want an already-exists refusal", changed, err)
	}
	changed, _, err := RegisterRuntime(p, "shared", ours, false)
	if !errdefs.IsAlreadyExists(err) || changed {
		t.Fatalf("RegisterRuntime = %v, %v; want an already-exists refusal", changed, err)
	}
	for _, want := range []string{"/srv/a/sandbox-logs/%ID%/", "--name", "--replace"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal does not name %q: %v", want, err)
		}
	}
	if b, _ := os.ReadFile(p); string(b) != string(orig) {
		t.Errorf("a refusal changed the file to %s", b)
	}
	if changed, _, err := RegisterRuntime(p, "shared", ours, true); err != nil || !changed {
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
