//go:build e2e

package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/runner"
)

// delivered maps each file under dir to its content.
func delivered(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil || !fi.Mode().IsRegular() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, _ := os.ReadFile(p)
		out[filepath.ToSlash(rel)] = b
		if fi.Mode() != 0o644 {
			t.Errorf("%s delivered with mode %v, want 0644", rel, fi.Mode())
		}
		return nil
	})
	return out
}

func reasons(res runner.Result) map[string]artifacts.Reason {
	m := map[string]artifacts.Reason{}
	for _, r := range res.Rejected {
		m[r.Path] = r.Reason
	}
	return m
}

func TestArtifactsPlotAndCSV(t *testing.T) {
	dest := t.TempDir()
	res, _ := runJSON(t, nil, "--artifacts", dest, "--", "python3", "-c", `
import matplotlib.pyplot as plt
plt.plot([1, 4, 9, 16]); plt.title("squares"); plt.savefig("/out/plot.png")
with open("/out/data.csv", "w") as f:
    f.write("n,square\n" + "".join(f"{n},{n*n}\n" for n in range(1, 5)))
`)
	if res.Reason != runner.ReasonExited || res.ExitCode != 0 {
		t.Fatalf("reason %s exit %d: %s", res.Reason, res.ExitCode, res.Stderr.Head)
	}
	files := delivered(t, dest)
	want := map[string]string{"plot.png": "image/png", "data.csv": "text/csv"}
	if len(res.Artifacts) != 2 || len(files) != 2 || len(res.Rejected) != 0 {
		t.Fatalf("artifacts %+v rejected %+v delivered %d", res.Artifacts, res.Rejected, len(files))
	}
	for _, a := range res.Artifacts {
		sum := sha256.Sum256(files[a.Path])
		if a.MIME != want[a.Path] || a.SHA256 != hex.EncodeToString(sum[:]) || a.Size != int64(len(files[a.Path])) {
			t.Errorf("%+v does not match the delivered file (sha256 %x, %d bytes)", a, sum, len(files[a.Path]))
		}
	}
	if !bytes.HasPrefix(files["plot.png"], []byte("\x89PNG")) {
		t.Errorf("plot.png is not a PNG")
	}
}

func TestArtifactsHostileCases(t *testing.T) {
	dest, quar := t.TempDir(), t.TempDir()
	script := `
import os, stat, shutil
os.chdir("/out")
os.symlink("/etc/shadow", "shadow")
os.symlink("/etc", "etcdir")
open("linked.txt", "w").write("one file, two names\n")
os.link("linked.txt", "linked2.txt")
os.mkfifo("pipe")
print("fifo", stat.S_ISFIFO(os.lstat("pipe").st_mode))
with open("sparse.txt", "w") as f:
    f.truncate(1 << 40)
shutil.copy("/bin/ls", "x.png")
open("x.txt", "w").write("<!DOCTYPE html><html><body><script>fetch('//evil')</script></body></html>")
open("new\nline.txt", "w").write("sneaky\n")
open("setuid.txt", "w").write("plain text\n")
os.chmod("setuid.txt", 0o4755)
print("setuid", oct(os.stat("setuid.txt").st_mode & 0o7777))
open("ok.txt", "w").write("fine\n")
`
	res, _ := runJSON(t, nil, "--file-size", "2TiB", "--artifacts", dest, "--quarantine", quar, "--", "python3", "-c", script)
	if res.Reason != runner.ReasonExited || res.ExitCode != 0 {
		t.Fatalf("reason %s exit %d: %s", res.Reason, res.ExitCode, res.Stderr.Head)
	}
	out := string(res.Stdout.Head)
	if !strings.Contains(out, "fifo True") || !strings.Contains(out, "setuid 0o4755") {
		t.Fatalf("the sandbox did not build the hostile tree: %s", out)
	}
	got := reasons(res)
	for path, want := range map[string]artifacts.Reason{
		"shadow":          artifacts.ReasonSymlink,
		"etcdir":          artifacts.ReasonSymlink,
		"linked.txt":      artifacts.ReasonHardlink,
		"linked2.txt":     artifacts.ReasonHardlink,
		"sparse.txt":      artifacts.ReasonTooLarge,
		"x.png":           artifacts.ReasonTypeNotAllowed,
		"x.txt":           artifacts.ReasonTypeNotAllowed,
		`new\x0aline.txt`: artifacts.ReasonBadName,
	} {
		if got[path] != want {
			t.Errorf("%q: reason %q, want %q (all: %+v)", path, got[path], want, res.Rejected)
		}
	}
	// gVisor keeps named pipes inside the sandbox kernel: the host never
	// sees this one, so it can neither block nor leave.
	if r, seen := got["pipe"]; seen && r != artifacts.ReasonNotRegular {
		t.Errorf("pipe: reason %q", r)
	}
	files := delivered(t, dest)
	if len(files) != 2 || string(files["ok.txt"]) != "fine\n" || string(files["setuid.txt"]) != "plain text\n" {
		t.Errorf("delivered %v", keys(files))
	}
	for _, a := range res.Artifacts {
		if a.Path != "ok.txt" && a.Path != "setuid.txt" {
			t.Errorf("accepted %+v", a)
		}
	}
	// Nothing from the host came out through a link.
	shadow, _ := os.ReadFile("/etc/shadow")
	for _, dir := range []string{dest, quar} {
		for name, b := range delivered(t, dir) {
			if len(shadow) > 0 && bytes.Contains(b, shadow[:min(len(shadow), 32)]) {
				t.Errorf("%s/%s holds host /etc/shadow", dir, name)
			}
		}
	}
	q := delivered(t, quar)
	for _, name := range []string{"x.png", "x.txt", `new\x0aline.txt`} {
		if _, ok := q[name]; !ok {
			t.Errorf("%s not quarantined (have %v)", name, keys(q))
		}
	}
}

func TestArtifactsFileCountCap(t *testing.T) {
	res, _ := runJSON(t, nil, "--out-files", "200", "--timeout", "120s", "--", "python3", "-c", `
made = failed = 0
for i in range(100000):
    try:
        open(f"/out/f{i:06d}.txt", "w").close()
        made += 1
    except OSError as e:
        failed += 1
        err = e.errno
print(made, failed, err)
`)
	if res.Reason != runner.ReasonExited || res.ExitCode != 0 {
		t.Fatalf("reason %s exit %d: %s", res.Reason, res.ExitCode, res.Stderr.Head)
	}
	fields := strings.Fields(string(res.Stdout.Head))
	if len(fields) != 3 || fields[2] != "28" { // ENOSPC
		t.Fatalf("want creation to stop with ENOSPC: %q", res.Stdout.Head)
	}
	var tooMany int
	for _, r := range res.Rejected {
		if r.Reason == artifacts.ReasonTooMany {
			tooMany++
		}
	}
	if len(res.Artifacts) != 200 || tooMany == 0 || len(res.Artifacts)+tooMany != atoi(fields[0]) {
		t.Errorf("made %s files: %d accepted, %d too_many", fields[0], len(res.Artifacts), tooMany)
	}
}

func TestArtifactsFillOutputIsENOSPC(t *testing.T) {
	res, _ := runJSON(t, nil, "--image", busybox, "--out-limit", "4MiB", "--", "sh", "-c",
		"dd if=/dev/zero of=/out/fill.txt bs=1M count=64; echo dd=$?")
	if res.Reason != runner.ReasonExited || res.ExitCode != 0 {
		t.Fatalf("reason %s exit %d", res.Reason, res.ExitCode)
	}
	if !strings.Contains(string(res.Stderr.Head), "No space left on device") || strings.Contains(string(res.Stdout.Head), "dd=0") {
		t.Errorf("want ENOSPC from dd: stdout %q stderr %q", res.Stdout.Head, res.Stderr.Head)
	}
}

func TestArtifactsCollectedAfterEveryProcessIsGone(t *testing.T) {
	dest := t.TempDir()
	// A background writer outlives the main process; collection must wait
	// for the sandbox to be gone, so the delivered file matches its hash.
	res, _ := runJSON(t, nil, "--image", busybox, "--artifacts", dest, "--", "sh", "-c",
		"(while true; do echo tick >> /out/bg.txt; done) & sleep 0.5")
	if res.Reason != runner.ReasonExited {
		t.Fatalf("reason %s", res.Reason)
	}
	if len(res.Artifacts) != 1 {
		t.Fatalf("artifacts %+v rejected %+v", res.Artifacts, res.Rejected)
	}
	b, _ := os.ReadFile(filepath.Join(dest, "bg.txt"))
	sum := sha256.Sum256(b)
	if a := res.Artifacts[0]; a.SHA256 != hex.EncodeToString(sum[:]) || a.Size != int64(len(b)) || len(b) == 0 {
		t.Errorf("delivered %d bytes (%x), reported %+v", len(b), sum, a)
	}
}

func TestInputsAreReadOnlyAndSymlinksNotFollowed(t *testing.T) {
	in := t.TempDir()
	os.WriteFile(filepath.Join(in, "prog.py"), []byte("print(open('/work/data/numbers.txt').read().split())\n"), 0o600)
	os.MkdirAll(filepath.Join(in, "data"), 0o700)
	os.WriteFile(filepath.Join(in, "data", "numbers.txt"), []byte("1 2 3\n"), 0o600)
	os.Symlink("/etc/hostname", filepath.Join(in, "data", "host-link"))
	res, _ := runJSON(t, nil, "--input", in+":/work", "--workdir", "/work", "--", "sh", "-c",
		"python3 prog.py; ls data; echo x > data/new 2>/dev/null || echo read-only")
	out := string(res.Stdout.Head)
	if res.ExitCode != 0 || !strings.Contains(out, "['1', '2', '3']") || !strings.Contains(out, "read-only") {
		t.Errorf("exit %d out %q err %q", res.ExitCode, out, res.Stderr.Head)
	}
	if strings.Contains(out, "host-link") {
		t.Errorf("a host symlink was carried into the sandbox: %s", out)
	}
	c := airlock(nil, "run", "--input", "/no/such/path", "--", "true")
	if c.code != 66 {
		t.Errorf("missing input: exit %d %s", c.code, c.stderr)
	}
	c = airlock(nil, "run", "--input", in+":/proc/x", "--", "true")
	if c.code != 64 {
		t.Errorf("input over /proc: exit %d %s", c.code, c.stderr)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func atoi(s string) int {
	n := 0
	for _, ch := range s {
		n = n*10 + int(ch-'0')
	}
	return n
}

func TestArtifactsNeverReplaceNorPlantDotfiles(t *testing.T) {
	dest := t.TempDir()
	os.WriteFile(filepath.Join(dest, "README"), []byte("the user's own\n"), 0o644)
	script := `printf 'from the sandbox\n' > /out/README
mkdir -p /out/.git && printf '[core]\n\tfsmonitor = "touch /tmp/pwned"\n' > /out/.git/config
printf 'fine\n' > /out/ok.txt`
	res, _ := runJSON(t, nil, "--image", busybox, "--artifacts", dest, "--", "sh", "-c", script)
	if res.Reason != runner.ReasonExited || res.ExitCode != 0 {
		t.Fatalf("reason %s exit %d: %s", res.Reason, res.ExitCode, res.Stderr.Head)
	}
	got := reasons(res)
	if got["README"] != artifacts.ReasonExists || got[".git/config"] != artifacts.ReasonHiddenName {
		t.Errorf("rejected %+v", res.Rejected)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "README")); string(b) != "the user's own\n" {
		t.Errorf("the user's README was replaced: %q", b)
	}
	if _, err := os.Lstat(filepath.Join(dest, ".git")); err == nil {
		t.Error(".git was planted in the destination")
	}
	if len(res.Artifacts) != 1 || res.Artifacts[0].Path != "ok.txt" {
		t.Errorf("artifacts %+v", res.Artifacts)
	}

	allowed := t.TempDir()
	res, _ = runJSON(t, nil, "--image", busybox, "--artifacts", allowed, "--artifacts-allow-dotfiles", "--", "sh", "-c", script)
	if len(res.Rejected) != 0 || len(res.Artifacts) != 3 {
		t.Errorf("with --artifacts-allow-dotfiles: artifacts %+v rejected %+v", res.Artifacts, res.Rejected)
	}
	if _, err := os.Stat(filepath.Join(allowed, ".git", "config")); err != nil {
		t.Errorf("allowed .git/config not delivered: %v", err)
	}
}

func TestArtifactsAndBatchOutRefusePlantedSymlinks(t *testing.T) {
	shared, private := t.TempDir(), t.TempDir()
	secret := filepath.Join(private, "secret")
	os.WriteFile(secret, []byte("root only\n"), 0o600)
	art := filepath.Join(shared, "art")
	os.Symlink(private, art)
	c := airlock(nil, "run", "--image", busybox, "--artifacts", art, "--", "sh", "-c", "echo ssh-ed25519 AAAA > /out/authorized_keys")
	// Refused as input, before the program runs.
	if c.code != 64 || !strings.Contains(c.stderr, "symlink") {
		t.Errorf("--artifacts through a symlink: exit %d (want 64), stderr %s", c.code, c.stderr)
	}
	if ents, _ := os.ReadDir(private); len(ents) != 1 {
		t.Errorf("the symlink's target received files: %v", ents)
	}

	jobs := filepath.Join(shared, "jobs.jsonl")
	os.WriteFile(jobs, []byte(`{"id":"j1","argv":["echo","hi"]}`+"\n"), 0o644)
	out := filepath.Join(shared, "results.jsonl")
	os.Symlink(secret, out)
	c = airlock(nil, "batch", jobs, "--out", out, "--engine", engineName, "--isolation", isolationName, "--image", busybox, "--out-dir", "none")
	if c.code != 64 || !strings.Contains(c.stderr, "symlink") {
		t.Errorf("batch --out through a symlink: exit %d (want 64), stderr %s", c.code, c.stderr)
	}
	if b, _ := os.ReadFile(secret); string(b) != "root only\n" {
		t.Errorf("the link's target was written: %q", b)
	}
}
