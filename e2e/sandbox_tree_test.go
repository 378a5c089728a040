//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/runner"
)

// cpTree runs `airlock cp --json SRC DST` of a directory and decodes its
// report.
func cpTree(t *testing.T, args ...string) (runner.TreeReport, cliResult) {
	t.Helper()
	c := airlock(nil, append([]string{"cp", "--json"}, args...)...)
	var rep runner.TreeReport
	if err := json.Unmarshal([]byte(c.stdout), &rep); err != nil {
		t.Fatalf("cp --json %v: exit %d: %v: %q %s", args, c.code, err, c.stdout, c.stderr)
	}
	return rep, c
}

// treeFiles lists a host tree: each directory as "dir", each file as its
// bytes, anything else by its type.
func treeFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	m := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case d.IsDir():
			m[rel] = "dir"
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			m[rel] = string(b)
			return err
		default:
			m[rel] = d.Type().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func refusedAs(t *testing.T, rep runner.TreeReport, want map[string]string) {
	t.Helper()
	got := map[string]string{}
	for _, tr := range rep.Transfers {
		if tr.Decision == runner.DecisionRefused {
			got[tr.Path] = string(tr.Reason)
		}
	}
	for p, r := range want {
		if got[p] != r {
			t.Errorf("%s: refused %q, want %q", p, got[p], r)
		}
	}
	if len(got) != len(want) {
		t.Errorf("refused %v, want %v", got, want)
	}
}

// A tree of 1,000 files goes up and comes back byte-identical; symlinks,
// FIFOs, hardlinks and files over the cap planted on either side are
// reported with their reasons and nothing outside the target is touched.
func TestSandboxTreeTransfers(t *testing.T) {
	si := sbCreate(t, "--idle-timeout", "5m", "--workspace-size", "32MiB", "--tmp-size", "64MiB")
	id := si.ID
	t.Cleanup(func() { airlock(nil, "sandbox", "rm", id) })

	src := filepath.Join(t.TempDir(), "proj")
	for i := range 1000 {
		dir := filepath.Join(src, fmt.Sprintf("d%d", i%10), fmt.Sprintf("sub%d", i%7))
		if i%3 == 0 {
			dir = filepath.Join(src, "données", "日本語")
		}
		os.MkdirAll(dir, 0o755)
		body := bytes.Repeat(fmt.Appendf(nil, "line %d of file %d\n", i, i), 1000)[:10_000]
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d é.txt", i)), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(src, "empty"), 0o755)

	rep, c := cpTree(t, src, id+":/home/user/proj")
	if c.code != 0 || rep.Summary.Files != 1000 || rep.Summary.Refused != 0 || len(rep.Transfers) != 1000 {
		t.Fatalf("upload: exit %d, %+v, %s", c.code, rep.Summary, c.stderr)
	}
	res, c := sbExec(t, id, nil, "sh", "-c", "find /home/user/proj -type f | wc -l; find /home/user/proj -type d -empty; stat -c '%u %a' '/home/user/proj/données/日本語/f0000 é.txt'")
	if got := string(res.Stdout.Head); res.ExitCode != 0 || got != "1000\n/home/user/proj/empty\n65534 644\n" {
		t.Fatalf("inside: %q (exit %d) %s", got, res.ExitCode, c.stderr)
	}
	// Into an existing directory: as DST/<name>; with "/.": the contents.
	dl := t.TempDir()
	rep, c = cpTree(t, id+":/home/user/proj", dl)
	if c.code != 0 || rep.Summary.Files != 1000 || rep.Summary.Refused != 0 {
		t.Fatalf("download: exit %d, %+v, %s", c.code, rep.Summary, c.stderr)
	}
	want := treeFiles(t, src)
	if got := treeFiles(t, filepath.Join(dl, "proj")); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("the tree came back different: %d entries, want %d", len(got), len(want))
	}
	dl2 := filepath.Join(t.TempDir(), "new")
	if rep, c = cpTree(t, id+":/home/user/proj/.", dl2); c.code != 0 || fmt.Sprint(treeFiles(t, dl2)) != fmt.Sprint(want) {
		t.Fatalf("download of the contents: exit %d, %+v, %s", c.code, rep.Summary, c.stderr)
	}
	// Again into the same place: nothing is replaced, each file is refused.
	rep, c = cpTree(t, id+":/home/user/proj/.", dl2)
	if c.code != 65 || rep.Summary.Refused != 1000 || rep.Transfers[0].Reason != "exists" {
		t.Fatalf("download over a copy: exit %d, %+v", c.code, rep.Summary)
	}

	// Hostile entries on this machine's side.
	secret := filepath.Join(t.TempDir(), "secret.txt")
	os.WriteFile(secret, []byte("host secret\n"), 0o600)
	bad := t.TempDir()
	os.WriteFile(filepath.Join(bad, "ok.txt"), []byte("ok\n"), 0o644)
	os.Symlink(secret, filepath.Join(bad, "link.txt"))
	os.Symlink(filepath.Dir(secret), filepath.Join(bad, "linkdir"))
	unix.Mkfifo(filepath.Join(bad, "fifo"), 0o644)
	os.WriteFile(filepath.Join(bad, "big.bin"), make([]byte, 33<<20), 0o644)
	rep, c = cpTree(t, bad+"/.", id+":/tmp/bad")
	if c.code != 65 || rep.Summary.Files != 1 {
		t.Errorf("a hostile upload: exit %d, %+v, %s", c.code, rep.Summary, c.stderr)
	}
	refusedAs(t, rep, map[string]string{"/tmp/bad/link.txt": "symlink", "/tmp/bad/linkdir": "symlink", "/tmp/bad/fifo": "not_regular", "/tmp/bad/big.bin": "too_large"})
	// Without --json: a line per entry, then the summary.
	c = airlock(nil, "cp", bad+"/.", id+":/tmp/bad2")
	lines := strings.Split(strings.TrimSpace(c.stdout), "\n")
	if c.code != 65 || len(lines) != 6 || !slices.Contains(lines, "accepted  /tmp/bad2/ok.txt  3 bytes") ||
		!slices.Contains(lines, "refused   /tmp/bad2/fifo  not_regular: a FIFO on this machine; only regular files and directories are copied") ||
		lines[5] != "1 files, 0 directories, 3 bytes copied; 4 refused" || !strings.Contains(c.stderr, "4 of the tree's entries were refused") {
		t.Errorf("cp without --json: exit %d\n%s\n%s", c.code, c.stdout, c.stderr)
	}
	res, _ = sbExec(t, id, nil, "sh", "-c", "ls -A /tmp/bad")
	if got := string(res.Stdout.Head); got != "ok.txt\n" {
		t.Errorf("/tmp/bad holds %q", got)
	}

	// Hostile entries on the sandbox's side.
	plant := `set -e; mkdir -p /home/user/out/sub /home/user/out/.git
echo ok > /home/user/out/ok.txt; echo cfg > /home/user/out/.git/config
ln -s /etc/passwd /home/user/out/pw; ln -s /etc /home/user/out/etc; ln -s /home/user /home/user/out/sub/ws; ln -s /tmp /home/user/out/tmp
mkfifo /home/user/out/fifo; echo h > /home/user/out/h1.txt; ln /home/user/out/h1.txt /home/user/out/h2.txt
mkdir /tmp/bigdir; head -c 40000000 /dev/zero | tr '\0' a > /tmp/bigdir/big.txt; echo s > /tmp/bigdir/small.txt`
	if res, c := sbExec(t, id, nil, "sh", "-c", plant); res.ExitCode != 0 {
		t.Fatalf("planting: %+v\n%s", res, c.stderr)
	}
	// gVisor keeps a FIFO made inside in the sentry: the host never sees
	// it. Plant one where the host does, as a program under runc would.
	if fifo := filepath.Join(si.Areas.Workspace, "out", "fifo"); !exists(fifo) {
		if err := unix.Mkfifo(fifo, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	dl3 := t.TempDir()
	outside := t.TempDir()
	os.Symlink(outside, filepath.Join(dl3, "out"))
	if c := airlock(nil, "cp", "--json", id+":/home/user/out", dl3); c.code != 64 || !strings.Contains(c.stderr, "symlink") {
		t.Errorf("into a planted symlink on this machine: exit %d, %s", c.code, c.stderr)
	}
	os.Remove(filepath.Join(dl3, "out"))
	rep, c = cpTree(t, id+":/home/user/out", dl3)
	if c.code != 65 || rep.Summary.Files != 1 {
		t.Errorf("a hostile download: exit %d, %+v, %s", c.code, rep.Summary, c.stderr)
	}
	refusedAs(t, rep, map[string]string{"/home/user/out/.git": "hidden_name", "/home/user/out/pw": "symlink", "/home/user/out/etc": "symlink",
		"/home/user/out/sub/ws": "symlink", "/home/user/out/fifo": "not_regular", "/home/user/out/h1.txt": "hardlink",
		"/home/user/out/h2.txt": "hardlink", "/home/user/out/tmp": "symlink"})
	if got := treeFiles(t, filepath.Join(dl3, "out")); fmt.Sprint(got) != fmt.Sprint(map[string]string{".": "dir", "ok.txt": "ok\n", "sub": "dir"}) {
		t.Errorf("delivered %v", got)
	}
	if ents, _ := os.ReadDir(outside); len(ents) > 0 {
		t.Errorf("written outside the target: %v", ents)
	}
	// Dot-named paths when asked.
	dl4 := t.TempDir()
	rep, c = cpTree(t, "--dotfiles", id+":/home/user/out/.", dl4)
	if b, err := os.ReadFile(filepath.Join(dl4, ".git", "config")); err != nil || string(b) != "cfg\n" || c.code != 65 {
		t.Errorf("--dotfiles: exit %d, %q, %v, %+v", c.code, b, err, rep.Summary)
	}
	// A file over the cap (the workspace's size), from /tmp.
	rep, c = cpTree(t, id+":/tmp/bigdir", t.TempDir())
	if c.code != 65 || rep.Summary.Files != 1 {
		t.Errorf("a download with a file over the cap: exit %d, %+v", c.code, rep.Summary)
	}
	refusedAs(t, rep, map[string]string{"/tmp/bigdir/big.txt": "too_large"})
	if !strings.Contains(c.stderr, "refused") {
		t.Errorf("stderr: %q", c.stderr)
	}
}

func exists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}
