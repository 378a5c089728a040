//go:build e2e

package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/runner"
)

// cpJSON runs `airlock cp --json SRC DST` and decodes its record.
func cpJSON(t *testing.T, src, dst string) (runner.Transfer, cliResult) {
	t.Helper()
	c := airlock(nil, "cp", "--json", src, dst)
	var tr runner.Transfer
	if err := json.Unmarshal([]byte(c.stdout), &tr); err != nil {
		t.Fatalf("cp --json %s %s: exit %d: %v: %q %s", src, dst, c.code, err, c.stdout, c.stderr)
	}
	return tr, c
}

// /tmp of a long-lived sandbox is its own capped tmpfs on the host, so cp
// reaches it both ways; it never follows a symlink the program planted
// there, and a full /tmp is ENOSPC, not an OOM kill.
func TestSandboxTmpTransfers(t *testing.T) {
	si := sbCreate(t, "--idle-timeout", "5m")
	id := si.ID
	t.Cleanup(func() { airlock(nil, "sandbox", "rm", id) })

	// Upload into /tmp (a new directory too), read by an exec.
	src := filepath.Join(t.TempDir(), "params.json")
	body := `{"alpha": 0.5}` + "\n"
	if err := os.WriteFile(src, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	tr, c := cpJSON(t, src, id+":/tmp/job/params.json")
	sum := sha256.Sum256([]byte(body))
	if c.code != 0 || tr.Decision != "accepted" || tr.SHA256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("upload to /tmp: exit %d, %+v, %s", c.code, tr, c.stderr)
	}
	if res, c := sbExec(t, id, nil, "cat", "/tmp/job/params.json"); res.ExitCode != 0 || string(res.Stdout.Head) != body {
		t.Fatalf("cat of the upload: %+v\n%s", res, c.stderr)
	}
	if res, _ := sbExec(t, id, nil, "sh", "-c", "stat -c '%u %a' /tmp/job/params.json; test ! -e /home/user/job"); strings.TrimSpace(string(res.Stdout.Head)) != "65534 644" || res.ExitCode != 0 {
		t.Fatalf("the upload's owner and mode inside: %q (exit %d)", res.Stdout.Head, res.ExitCode)
	}

	// An exec writes /tmp/x.csv; cp downloads it with its sha256.
	gen := `rows = ["k,v"] + ["%d,%d" % (i, i * i) for i in range(500)]
open("/tmp/x.csv", "w").write("\n".join(rows) + "\n")`
	if res, c := sbExec(t, id, nil, "python3", "-c", gen); res.ExitCode != 0 {
		t.Fatalf("writing /tmp/x.csv: %+v\n%s", res, c.stderr)
	}
	csv := "k,v\n"
	for i := range 500 {
		csv += strconv.Itoa(i) + "," + strconv.Itoa(i*i) + "\n"
	}
	dl := t.TempDir()
	tr, c = cpJSON(t, id+":/tmp/x.csv", dl)
	got, err := os.ReadFile(filepath.Join(dl, "x.csv"))
	want := sha256.Sum256([]byte(csv))
	if c.code != 0 || err != nil || sha256.Sum256(got) != want || tr.SHA256 != hex.EncodeToString(want[:]) || tr.MIME != "text/csv" {
		t.Fatalf("download of /tmp/x.csv: exit %d, %+v, %v, %q; want sha256 %x", c.code, tr, err, c.stderr, want)
	}

	// Symlinks the program planted in /tmp: never followed either way.
	if res, c := sbExec(t, id, nil, "sh", "-c", "ln -s /etc /tmp/evil && ln -s /etc/passwd /tmp/pw && ln -s /home/user /tmp/ws"); res.ExitCode != 0 {
		t.Fatalf("planting: %+v\n%s", res, c.stderr)
	}
	etc, _ := os.ReadFile("/etc/passwd")
	for _, tc := range []struct{ name, src, dst string }{
		{"UploadThroughDir", src, id + ":/tmp/evil/x"},
		{"UploadOverLink", src, id + ":/tmp/pw"},
		{"UploadIntoWorkspaceLink", src, id + ":/tmp/ws/x"},
		{"DownloadLink", id + ":/tmp/pw", filepath.Join(dl, "pw")},
	} {
		tr, c := cpJSON(t, tc.src, tc.dst)
		if c.code != 65 || tr.Decision != "refused" || tr.Reason != "symlink" {
			t.Errorf("%s: exit %d, %+v, %q; want 65 refused (symlink)", tc.name, c.code, tr, c.stderr)
		}
	}
	if now, _ := os.ReadFile("/etc/passwd"); string(now) != string(etc) {
		t.Fatal("/etc/passwd changed")
	}
	if _, err := os.Lstat(filepath.Join(dl, "pw")); err == nil {
		t.Error("a refused download left its file")
	}
	if res, _ := sbExec(t, id, nil, "sh", "-c", "test ! -e /etc/x && test ! -e /home/user/x && test -L /tmp/pw && test -L /tmp/evil"); res.ExitCode != 0 {
		t.Fatalf("a refused upload went through a planted link: %+v", res)
	}

	// Past --tmp-size (64MiB, well under --memory): ENOSPC for the
	// program, no_space for an upload, and the sandbox lives on.
	fill := `import errno, os
try:
    for name in ("a", "b"):
        with open("/tmp/fill-" + name, "wb") as f:
            for _ in range(40):
                f.write(b"\0" * (1 << 20))
                f.flush()
    print("filled")
except OSError as e:
    print(errno.errorcode[e.errno])`
	res, c := sbExec(t, id, nil, "python3", "-c", fill)
	if res.Reason != "exited" || res.ExitCode != 0 || strings.TrimSpace(string(res.Stdout.Head)) != "ENOSPC" {
		t.Fatalf("filling /tmp: %+v\n%s; want ENOSPC, not an OOM kill", res, c.stderr)
	}
	tr, c = cpJSON(t, src, id+":/tmp/more.json")
	if c.code != 65 || tr.Reason != "no_space" {
		t.Errorf("upload into a full /tmp: exit %d, %+v, %q; want 65 refused (no_space)", c.code, tr, c.stderr)
	}
	if res, c := sbExec(t, id, nil, "sh", "-c", "rm /tmp/fill-*; echo freed"); strings.TrimSpace(string(res.Stdout.Head)) != "freed" {
		t.Fatalf("after the fill: %+v\n%s", res, c.stderr)
	}
	if tr, c := cpJSON(t, src, id+":/tmp/more.json"); c.code != 0 || tr.Decision != "accepted" {
		t.Fatalf("upload after freeing /tmp: exit %d, %+v, %s", c.code, tr, c.stderr)
	}

	if c := airlock(nil, "sandbox", "rm", id); c.code != 0 {
		t.Fatalf("sandbox rm: exit %d: %s", c.code, c.stderr)
	}
	waitGone(t, id, 5*time.Second)
}
