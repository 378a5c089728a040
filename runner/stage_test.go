package runner

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/internal/roottest"
)

// stageFor stages inputs into a fresh run directory under root and returns
// the scratch and the error; the run directory is removed at the end.
func stageFor(t *testing.T, root string, inputs []Input, limit int64) (*scratch, error) {
	roottest.Require(t, "inputs are staged on a tmpfs mount")
	t.Helper()
	sc := &scratch{dir: filepath.Join(root, "runs", "r")}
	if err := os.MkdirAll(sc.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.cleanup() })
	err := sc.stageInputs(context.Background(), root, inputs, limit, time.Time{})
	return sc, err
}

// stagedContains reports whether any file staged under dir holds needle.
func stagedContains(t *testing.T, dir string, needle []byte) bool {
	t.Helper()
	found := false
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, needle) {
				found = true
			}
		}
		return nil
	})
	return found
}

// An input tree whose owner keeps swapping a subdirectory with a symlink to
// a directory outside the tree must never get anything from outside staged.
func TestStageInputsSwapRace(t *testing.T) {
	roottest.Require(t, "inputs are staged on a tmpfs mount")
	base := t.TempDir()
	secret := []byte("SECRET-outside-the-tree")
	outside := filepath.Join(base, "outside")
	tree := filepath.Join(base, "tree")
	for _, d := range []string{outside, filepath.Join(tree, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(outside, "shadow"), secret, 0o644)
	for i := range 20 {
		os.WriteFile(filepath.Join(tree, "sub", "f"+string(rune('a'+i))), []byte("inside"), 0o644)
	}
	if err := os.Symlink(outside, filepath.Join(tree, "link")); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a, b := filepath.Join(tree, "sub"), filepath.Join(tree, "link")
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err == nil {
				swaps.Add(1)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	root := filepath.Join(base, "root")
	refused := 0
	for i := range 60 {
		sc, err := stageFor(t, filepath.Join(root, string(rune('a'+i%26))+string(rune('a'+i/26))), []Input{{Host: tree, Sandbox: "/work/tree"}}, 1<<20)
		if stagedContains(t, sc.dir, secret) {
			t.Fatalf("try %d: a file from outside the input tree was staged", i)
		}
		for _, f := range sc.inputs {
			if filepath.Base(f.Path) == "shadow" {
				t.Fatalf("try %d: the receipt lists %q, from outside the tree", i, f.Path)
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, errChanged):
			refused++
		default:
			t.Fatalf("try %d: %v, want success or a changed-while-copied refusal", i, err)
		}
		sc.cleanup()
	}
	if swaps.Load() == 0 {
		t.Fatal("the swapper never swapped")
	}
	t.Logf("%d swaps, %d of 60 stagings refused as changed", swaps.Load(), refused)
}

// A FIFO swapped in for a file, with a writer feeding it forever, is
// refused quickly: staging never reads it to EOF.
func TestStageInputsRefusesSwappedFIFO(t *testing.T) {
	roottest.Require(t, "inputs are staged on a tmpfs mount")
	base := t.TempDir()
	tree := filepath.Join(base, "tree")
	os.MkdirAll(tree, 0o755)
	file, fifo := filepath.Join(tree, "data"), filepath.Join(tree, "pipe")
	os.WriteFile(file, []byte("small"), 0o644)
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// A writer on the FIFO that never stops.
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for {
			select {
			case <-stop:
				return
			default:
			}
			w.Write(chunk)
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			unix.Renameat2(unix.AT_FDCWD, file, unix.AT_FDCWD, fifo, unix.RENAME_EXCHANGE)
		}
	}()
	defer func() { close(stop); w.Close(); wg.Wait() }()

	const limit = 1 << 20
	for i := range 50 {
		type out struct {
			sc  *scratch
			err error
		}
		ch := make(chan out, 1)
		go func() {
			sc, err := stageFor(t, filepath.Join(base, "root", string(rune('a'+i%26))+string(rune('a'+i/26))), []Input{{Host: tree, Sandbox: "/work/tree"}}, limit)
			ch <- out{sc, err}
		}()
		select {
		case o := <-ch:
			if o.err != nil && !errors.Is(o.err, errChanged) {
				t.Fatalf("try %d: %v, want success or a changed-while-copied refusal", i, o.err)
			}
			var n int64
			filepath.WalkDir(o.sc.dir, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					if fi, err := d.Info(); err == nil {
						n += fi.Size()
					}
				}
				return nil
			})
			if n > limit {
				t.Fatalf("try %d: %d bytes staged, over the %d-byte limit", i, n, limit)
			}
			for _, f := range o.sc.inputs {
				if f.Size != int64(len("small")) {
					t.Fatalf("try %d: staged %+v, not the small file", i, f)
				}
			}
			o.sc.cleanup()
		case <-time.After(10 * time.Second):
			t.Fatalf("try %d: staging with a FIFO fed forever did not end within 10s", i)
		}
	}
}

// Nothing at or below airlock's root is ever an input, whatever the path.
func TestStageInputsRefusesAirlockRoot(t *testing.T) {
	base := t.TempDir()
	root := filepath.Join(base, "root")
	os.MkdirAll(filepath.Join(root, "keys"), 0o700)
	os.WriteFile(filepath.Join(root, "keys", "receipt.key"), []byte("KEY"), 0o600)
	os.Symlink(filepath.Join(root, "keys"), filepath.Join(base, "keys-link"))
	// A root's directory kept elsewhere, by symlink, is still airlock's.
	os.MkdirAll(filepath.Join(base, "store-elsewhere"), 0o700)
	os.WriteFile(filepath.Join(base, "store-elsewhere", "blob"), []byte("KEY"), 0o600)
	os.Symlink(filepath.Join(base, "store-elsewhere"), filepath.Join(root, "store"))
	for _, in := range []Input{
		{Host: filepath.Join(root, "keys")},
		{Host: filepath.Join(root, "keys", "receipt.key")},
		{Host: root},
		{Host: filepath.Join(base, "keys-link")},
		{Host: filepath.Join(root, "keys", "..", "keys")},
		{Host: base}, // holds the root
		{Host: filepath.Join(base, "store-elsewhere")},
		{Host: filepath.Join(base, "store-elsewhere", "blob")},
		{Host: "root/keys", Beneath: base},
		{Host: "root", Beneath: base},
	} {
		in.Sandbox = "/work/x"
		sc, err := stageFor(t, root, []Input{in}, 1<<20)
		if err == nil || !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "airlock's own state directory") {
			t.Errorf("%+v: %v, want a refusal naming airlock's state directory", in, err)
		}
		if stagedContains(t, sc.dir, []byte("KEY")) {
			t.Errorf("%+v: the key was staged", in)
		}
		sc.cleanup()
	}
}

// Inputs land in a nosuid, nodev tmpfs no bigger than the limit plus
// slack, with modes reduced, and the tmpfs goes at cleanup.
func TestStageInputsTmpfs(t *testing.T) {
	base := t.TempDir()
	tree := filepath.Join(base, "tree")
	os.MkdirAll(filepath.Join(tree, "d"), 0o700)
	os.WriteFile(filepath.Join(tree, "d", "run.sh"), []byte("#!/bin/sh\n"), 0o4755)
	os.WriteFile(filepath.Join(tree, "data"), []byte("12345"), 0o600)
	os.Symlink("/etc/passwd", filepath.Join(tree, "passwd"))
	syscall.Mkfifo(filepath.Join(tree, "fifo"), 0o644)
	const limit = 4 << 20
	sc, err := stageFor(t, filepath.Join(base, "root"), []Input{{Host: tree, Sandbox: "/work/tree"}, {Host: filepath.Join(tree, "data"), Sandbox: "/work/one"}}, limit)
	if err != nil {
		t.Fatal(err)
	}
	in := filepath.Join(sc.dir, "in")
	var fs unix.Statfs_t
	if err := unix.Statfs(in, &fs); err != nil {
		t.Fatal(err)
	}
	if fs.Type != unix.TMPFS_MAGIC || fs.Flags&unix.ST_NOSUID == 0 || fs.Flags&unix.ST_NODEV == 0 {
		t.Errorf("input space: type %#x flags %#x, want a nosuid,nodev tmpfs", fs.Type, fs.Flags)
	}
	if size := int64(fs.Blocks) * fs.Bsize; size > limit+inputSizeSlack {
		t.Errorf("input tmpfs of %d bytes, over the %d-byte limit plus slack", size, limit)
	}
	if fs.Files > maxInputEntries+100 {
		t.Errorf("input tmpfs has %d inodes", fs.Files)
	}
	want := map[string]os.FileMode{"0/d": 0o755 | os.ModeDir, "0/d/run.sh": 0o755, "0/data": 0o644, "1": 0o644}
	for p, mode := range want {
		fi, err := os.Lstat(filepath.Join(in, p))
		if err != nil || fi.Mode() != mode {
			t.Errorf("%s: %v %v, want mode %v", p, fi.Mode(), err, mode)
		}
	}
	for _, p := range []string{"0/passwd", "0/fifo"} {
		if _, err := os.Lstat(filepath.Join(in, p)); err == nil {
			t.Errorf("%s was staged", p)
		}
	}
	var paths []string
	for _, f := range sc.inputs {
		paths = append(paths, f.Path)
	}
	if !slices.Equal(paths, []string{"/work/tree/d/run.sh", "/work/tree/data", "/work/one"}) {
		t.Errorf("receipt inputs %q", paths)
	}
	if err := sc.cleanup(); err != nil {
		t.Fatal(err)
	}
	if m := mountsUnder(sc.dir); len(m) != 0 {
		t.Errorf("mounts left behind: %q", m)
	}
}

// The byte cap holds against the listed size and against what a read
// actually returns (a /proc file says it is empty).
func TestStageInputsLimit(t *testing.T) {
	base := t.TempDir()
	big := filepath.Join(base, "big")
	os.WriteFile(big, make([]byte, 2048), 0o644)
	for _, host := range []string{big, "/proc/self/status"} {
		sc, err := stageFor(t, filepath.Join(base, "root"), []Input{{Host: host, Sandbox: "/work/x"}}, 16)
		if !errdefs.IsInvalidArgument(err) || !strings.Contains(fmt.Sprint(err), "16-byte cap") {
			t.Errorf("%s: %v, want the cap refusal", host, err)
		}
		var st unix.Statfs_t
		if unix.Statfs(filepath.Join(sc.dir, "in"), &st) == nil && st.Type == unix.TMPFS_MAGIC && int64(st.Blocks-st.Bfree)*st.Bsize > inputSizeSlack {
			t.Errorf("%s: %d blocks used", host, st.Blocks-st.Bfree)
		}
		sc.cleanup()
	}
}

// Staging has a deadline.
func TestStageInputsDeadline(t *testing.T) {
	roottest.Require(t, "inputs are staged on a tmpfs mount")
	base := t.TempDir()
	os.WriteFile(filepath.Join(base, "f"), []byte("x"), 0o644)
	sc := &scratch{dir: filepath.Join(base, "root", "runs", "r")}
	os.MkdirAll(sc.dir, 0o700)
	defer sc.cleanup()
	err := sc.stageInputs(context.Background(), filepath.Join(base, "root"), []Input{{Host: filepath.Join(base, "f"), Sandbox: "/work/f"}}, 1<<20, time.Now().Add(-time.Second))
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(fmt.Sprint(err), "staging deadline") {
		t.Errorf("past the deadline: %v", err)
	}
}

// linkFixture makes, in a new directory base, airlock's root with an
// audit log and a receipt key, and shadow, a file of root's, mode 0600:
// the files a hard link in a tree must not give away.
func linkFixture(t *testing.T) (base, root, shadow string) {
	t.Helper()
	base = t.TempDir()
	root = filepath.Join(base, "root")
	os.MkdirAll(filepath.Join(root, "keys"), 0o700)
	os.WriteFile(filepath.Join(root, "audit.jsonl"), []byte("SECRET-AUDIT"), 0o600)
	os.WriteFile(filepath.Join(root, "keys", "receipt.key"), []byte("SECRET-KEY"), 0o600)
	shadow = filepath.Join(base, "shadow")
	os.WriteFile(shadow, []byte("SECRET-SHADOW"), 0o600)
	return base, root, shadow
}

// modes chowns (to uid) and chmods each path as given, without following
// a symlink.
func modes(t *testing.T, uid int, owned []string, mode map[string]os.FileMode) {
	t.Helper()
	for _, p := range owned {
		if err := os.Lchown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	for p, m := range mode {
		if err := os.Chmod(p, m); err != nil {
			t.Fatal(err)
		}
	}
}

// stageCase is an input and the refusal it must meet, "" when staged.
type stageCase struct {
	in   Input
	want string
}

// wantStaged stages each case alone and checks its outcome, and that no
// file holding "SECRET" was staged.
func wantStaged(t *testing.T, root string, cases []stageCase) {
	t.Helper()
	for _, c := range cases {
		c.in.Sandbox = "/work/x"
		sc, err := stageFor(t, root, []Input{c.in}, 1<<20)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.in, err)
		case c.want != "" && (err == nil || !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: %v, want a refusal saying %q", c.in, err, c.want)
		}
		if stagedContains(t, sc.dir, []byte("SECRET")) {
			t.Errorf("%+v: a secret was staged", c.in)
		}
		sc.cleanup()
	}
}

// A file with more than one link is staged only when the owner of the
// input root and of the directory holding it owns it: on a host with
// fs.protected_hardlinks=0, anyone who can write in a tree can link into
// it a file they cannot read, and airlock copies as root. Nor is a file
// of airlock's root ever staged, by a link in a tree of root's own.
func TestStageInputsRefusesForeignHardLinks(t *testing.T) {
	roottest.Require(t, "inputs are staged on a tmpfs mount, and chown")
	const user = 4321
	base, root, shadow := linkFixture(t)

	// A user's tree: their own linked files go in; root's do not.
	tree := filepath.Join(base, "tree")
	os.MkdirAll(filepath.Join(tree, "sub"), 0o755)
	os.WriteFile(filepath.Join(tree, "own.txt"), []byte("own"), 0o644)
	os.Link(filepath.Join(tree, "own.txt"), filepath.Join(tree, "sub", "own-again.txt"))
	os.WriteFile(filepath.Join(tree, "by-root.txt"), []byte("root made it"), 0o644) // one link: root copied it in
	os.Link(shadow, filepath.Join(tree, "sub", "shadow"))
	// A tree of root's own, with a user's directory in it.
	rtree := filepath.Join(base, "rtree")
	os.MkdirAll(filepath.Join(rtree, "users"), 0o755)
	os.Link(shadow, filepath.Join(rtree, "users", "shadow"))
	os.WriteFile(filepath.Join(rtree, "a"), []byte("a"), 0o644)
	os.Link(filepath.Join(rtree, "a"), filepath.Join(rtree, "b"))
	os.Link(filepath.Join(root, "audit.jsonl"), filepath.Join(rtree, "audit"))
	os.Link(filepath.Join(root, "keys", "receipt.key"), filepath.Join(rtree, "key"))
	modes(t, user, []string{tree, filepath.Join(tree, "sub"), filepath.Join(tree, "own.txt"), filepath.Join(rtree, "users")}, nil)

	wantStaged(t, root, []stageCase{
		{Input{Host: "tree/own.txt", Beneath: base}, "owned by uid 0"}, // the input root, base, is root's
		{Input{Host: tree}, "has 3 hard links and is owned by uid 0, but the input root"},
		{Input{Host: "sub", Beneath: tree}, "has 3 hard links and is owned by uid 0, but the input root"},
		{Input{Host: "sub/shadow", Beneath: tree}, "Copy the file into the tree"},
		{Input{Host: "own.txt", Beneath: tree}, ""},
		{Input{Host: "by-root.txt", Beneath: tree}, ""},
		{Input{Host: "users", Beneath: rtree}, "the directory holding it is owned by uid 4321"},
		{Input{Host: rtree}, "airlock's own file"}, // audit, the first name met
		{Input{Host: "b", Beneath: rtree}, ""},
		{Input{Host: "audit", Beneath: rtree}, "airlock's own file"},
		{Input{Host: "key", Beneath: rtree}, "airlock's own file"},
		{Input{Host: filepath.Join(rtree, "audit")}, "airlock's own file"},
	})
}

// A root-owned directory others may write in (a 1777 drop directory, one
// writable by another group) is anyone's for the hard-link rule: a file
// of root's with two links in it may be another user's link to a file
// they cannot read. A tree of root's own that no one else may write in
// stages its linked files as before, and so does a user's 0775 directory
// of their own private group (umask 002).
func TestStageInputsRefusesLinksInWritableRoots(t *testing.T) {
	roottest.Require(t, "inputs are staged on a tmpfs mount")
	base, root, shadow := linkFixture(t)
	drop := filepath.Join(base, "drop") // root's, mode 1777
	os.MkdirAll(filepath.Join(drop, "sub"), 0o755)
	os.Link(shadow, filepath.Join(drop, "notes.txt"))
	os.WriteFile(filepath.Join(drop, "sub", "ok.txt"), []byte("ok"), 0o644)
	group := filepath.Join(base, "group") // root's, group 4321, mode 0775
	os.MkdirAll(group, 0o755)
	os.Link(shadow, filepath.Join(group, "notes.txt"))
	if err := os.Chown(group, 0, 4321); err != nil {
		t.Fatal(err)
	}
	private := filepath.Join(base, "private") // root's, group root, mode 0775
	os.MkdirAll(private, 0o755)
	os.WriteFile(filepath.Join(private, "a"), []byte("a"), 0o644)
	os.Link(filepath.Join(private, "a"), filepath.Join(private, "b"))
	rtree := filepath.Join(base, "rtree") // root's, mode 0755, one subdirectory 0777
	os.MkdirAll(filepath.Join(rtree, "open"), 0o755)
	os.WriteFile(filepath.Join(rtree, "a"), []byte("a"), 0o644)
	os.Link(filepath.Join(rtree, "a"), filepath.Join(rtree, "b"))
	os.Link(shadow, filepath.Join(rtree, "open", "notes.txt"))
	modes(t, 0, nil, map[string]os.FileMode{drop: 0o777 | os.ModeSticky, group: 0o775, private: 0o775, filepath.Join(rtree, "open"): 0o777})

	wantStaged(t, root, []stageCase{
		{Input{Host: drop}, `but the input root "` + drop + `" is writable by every user (mode 01777), so anyone may have linked it there`},
		{Input{Host: "notes.txt", Beneath: drop}, "is writable by every user (mode 01777)"},
		{Input{Host: "sub", Beneath: drop}, ""}, // one link each
		{Input{Host: group}, "is writable by its group 4321 (mode 0775)"},
		{Input{Host: private}, ""},
		{Input{Host: rtree}, "the directory holding it is writable by every user (mode 0777)"},
		{Input{Host: "open/notes.txt", Beneath: rtree}, "chmod go-w"},
		{Input{Host: "a", Beneath: rtree}, ""},
		{Input{Host: "b", Beneath: rtree}, ""},
		{Input{Host: filepath.Join(rtree, "b")}, ""},
	})
}

// tarHost runs TarHostTree on src, as airlock cp does, with airlock's
// root at root, and returns the files it sent (name to bytes) and its
// decisions.
func tarHost(t *testing.T, src, root string) (map[string]string, *decisions, error) {
	t.Helper()
	var buf bytes.Buffer
	d := &decisions{}
	err := TarHostTree(context.Background(), src, &buf, "/home/user/x", 0, d.add, AirlockRoot(root))
	sent := map[string]string{}
	tr := tar.NewReader(&buf)
	for err == nil {
		h, terr := tr.Next()
		if errors.Is(terr, io.EOF) {
			break
		}
		if terr != nil {
			t.Fatal(terr)
		}
		b, _ := io.ReadAll(tr)
		sent[h.Name] = string(b)
	}
	return sent, d, err
}

// airlock cp reads a host tree as root, so it refuses what staging does:
// a file with more than one link that anyone but its owner may have
// linked into the tree (root's file in another user's tree, or in a
// directory every user may write in), and any file or directory of
// airlock's root. A tree of root's own with links between its own files
// still copies.
func TestTarHostTreeRefusesForeignHardLinks(t *testing.T) {
	roottest.Require(t, "chown")
	const user = 4321
	base, root, shadow := linkFixture(t)
	// A user's tree: their own linked files go; root's do not.
	tree := filepath.Join(base, "tree")
	os.MkdirAll(tree, 0o755)
	os.WriteFile(filepath.Join(tree, "own.txt"), []byte("own"), 0o644)
	os.Link(filepath.Join(tree, "own.txt"), filepath.Join(tree, "own-again.txt"))
	os.Link(shadow, filepath.Join(tree, "notes.txt"))
	// A tree of root's own, with a user's directory and a 1777 one in it.
	rtree := filepath.Join(base, "rtree")
	os.MkdirAll(filepath.Join(rtree, "users"), 0o755)
	os.MkdirAll(filepath.Join(rtree, "drop"), 0o755)
	os.WriteFile(filepath.Join(rtree, "a"), []byte("a"), 0o644)
	os.Link(filepath.Join(rtree, "a"), filepath.Join(rtree, "b"))
	os.Link(shadow, filepath.Join(rtree, "users", "shadow"))
	os.Link(shadow, filepath.Join(rtree, "drop", "shadow"))
	os.Link(filepath.Join(root, "audit.jsonl"), filepath.Join(rtree, "audit"))
	os.Link(filepath.Join(root, "keys", "receipt.key"), filepath.Join(rtree, "key"))
	// A drop directory of root's, mode 1777: anyone's.
	drop := filepath.Join(base, "drop")
	os.MkdirAll(drop, 0o755)
	os.Link(shadow, filepath.Join(drop, "notes.txt"))
	modes(t, user, []string{tree, filepath.Join(tree, "own.txt"), filepath.Join(rtree, "users")},
		map[string]os.FileMode{filepath.Join(rtree, "drop"): 0o777 | os.ModeSticky, drop: 0o777 | os.ModeSticky})

	for _, c := range []struct {
		src     string
		refused map[string][]string // path below the tree: what its refusal says
		sent    map[string]string   // name: bytes
	}{
		{tree, map[string][]string{"notes.txt": {
			filepath.Join(tree, "notes.txt") + ` has 5 hard links and is owned by uid 0, but the tree's root "` + tree + `" is owned by uid 4321`,
			"Copy the file into the tree instead of linking it (cp, not ln)",
		}}, map[string]string{"own.txt": "own", "own-again.txt": "own"}},
		{rtree, map[string][]string{
			"users/shadow": {"the directory holding it is owned by uid 4321"},
			"drop/shadow":  {"the directory holding it is writable by every user (mode 01777)", "chmod go-w"},
			"audit":        {"airlock's own file", "remove the link from the tree"},
			"key":          {"airlock's own file"},
		}, map[string]string{"a": "a", "b": "a", "users/": "", "drop/": ""}},
		{drop, map[string][]string{"notes.txt": {`the tree's root "` + drop + `" is writable by every user (mode 01777), so anyone may have linked it there`}}, nil},
	} {
		sent, d, err := tarHost(t, c.src, root)
		if err != nil {
			t.Fatal(err)
		}
		for rel, wants := range c.refused {
			p := "/home/user/x/" + rel
			d.want(t, p, artifacts.ReasonHardlink)
			for _, want := range wants {
				if tr := d.byPath[p]; !strings.Contains(tr.Detail, want) {
					t.Errorf("%s: %q, want it to say %q", p, tr.Detail, want)
				}
			}
		}
		for name, body := range sent {
			if strings.Contains(body, "SECRET") || c.sent[name] != body {
				t.Errorf("%s: %s sent %q", c.src, name, body)
			}
		}
		if len(sent) != len(c.sent) || len(d.all) != len(c.refused) {
			t.Errorf("%s: sent %v, decisions %v", c.src, sent, d.paths())
		}
	}

	// airlock's root is never sent: named, or held by the tree.
	for _, src := range []string{root, filepath.Join(root, "keys")} {
		if _, _, err := tarHost(t, src, root); !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "airlock's own state directory") {
			t.Errorf("%s: %v, want a refusal naming airlock's state directory", src, err)
		}
	}
	sent, d, err := tarHost(t, base, root)
	if err != nil {
		t.Fatal(err)
	}
	d.want(t, "/home/user/x/root", ReasonInvalidPath)
	for name, body := range sent {
		if strings.Contains(body, "SECRET-AUDIT") || strings.Contains(body, "SECRET-KEY") {
			t.Errorf("%s: airlock's file was sent", name)
		}
	}
	if sent["shadow"] != "SECRET-SHADOW" {
		t.Errorf("root's own file in root's own tree was not sent: %v", d.paths())
	}
}
