package runner

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/artifacts"
)

func probeName(t *testing.T) string {
	b := make([]byte, 6)
	rand.Read(b)
	return "airlock-probe-" + hex.EncodeToString(b)
}

func upload(t *testing.T, a *Areas, p string, body []byte) (Transfer, error) {
	t.Helper()
	return a.Upload(context.Background(), p, bytes.NewReader(body), 1<<20)
}

func wantReason(t *testing.T, what string, tr Transfer, err error, want artifacts.Reason) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: accepted (%+v), want %s", what, tr, want)
		return
	}
	if got := ReasonOf(err); got != want {
		t.Errorf("%s: reason %q (%v), want %q", what, got, err, want)
	}
	if tr.Decision != DecisionRefused || tr.Reason != ReasonOf(err) {
		t.Errorf("%s: record %+v does not carry the refusal", what, tr)
	}
}

// outsideDir is a directory outside the areas that must stay empty.
func outsideDir(t *testing.T) string {
	d := t.TempDir()
	t.Cleanup(func() {
		if ents, _ := os.ReadDir(d); len(ents) > 0 {
			t.Errorf("written outside the sandbox's areas: %v", ents)
		}
	})
	return d
}

// onlyInAreas checks that nothing appeared in the sandbox directory beside
// the areas.
func onlyInAreas(t *testing.T, a *Areas) {
	t.Helper()
	ents, _ := os.ReadDir(a.Dir)
	for _, e := range ents {
		switch e.Name() {
		case "workspace", "workspace.img", "tmp", "out":
		default:
			t.Errorf("%s appeared in the sandbox directory", e.Name())
		}
	}
}

func TestUploadRefusesPaths(t *testing.T) {
	a := newAreas(t, AreasSpec{})
	probe := probeName(t)
	for _, c := range []struct {
		path string
		want artifacts.Reason
	}{
		{"../../etc/" + probe, ReasonInvalidPath},
		{"/home/user/../../etc/" + probe, ReasonInvalidPath},
		{"/home/user/a/../../../" + probe, ReasonInvalidPath},
		{"/etc/passwd", ReasonInvalidPath},
		{"/etc/" + probe, ReasonInvalidPath},
		{"/out/x", ReasonInvalidPath},
		{"/home/userx/y", ReasonInvalidPath},
		{"/home/user", ReasonIsDirectory},
		{"/tmp", ReasonIsDirectory},
		{"/home/user/", ReasonInvalidPath},
		{"/home/user//x", ReasonInvalidPath},
		{"/home/user/./x", ReasonInvalidPath},
		{"", ReasonInvalidPath},
		{"/home/user/a\nb", ReasonInvalidPath},
		{"/home/user/.airlock-upload-x", ReasonInvalidPath},
		{"/home/user/" + strings.Repeat("x", 256), ReasonInvalidPath},
	} {
		tr, err := upload(t, a, c.path, []byte("pwned\n"))
		wantReason(t, fmt.Sprintf("upload to %q", c.path), tr, err, c.want)
	}
	if _, err := os.Lstat("/etc/" + probe); err == nil {
		os.Remove("/etc/" + probe)
		t.Error("an upload reached /etc")
	}
	if b, _ := os.ReadFile("/etc/passwd"); bytes.Contains(b, []byte("pwned")) {
		t.Fatal("an upload wrote /etc/passwd")
	}
	onlyInAreas(t, a)
}

// Symlinks the program planted, at a parent component and at the final
// one, pointing to /etc and to a directory outside: never followed.
func TestUploadRefusesPlantedSymlinks(t *testing.T) {
	a := newAreas(t, AreasSpec{})
	out := outsideDir(t)
	probe := probeName(t)
	target := filepath.Join(t.TempDir(), "target")
	os.WriteFile(target, []byte("orig"), 0o644)
	for name, dest := range map[string]string{"etc": "/etc", "out": out, "file": target, "dangling": "/etc/" + probe} {
		if err := os.Symlink(dest, filepath.Join(a.Workspace, name)); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink(out, filepath.Join(a.Tmp, "out"))
	for _, p := range []string{
		"/home/user/etc/" + probe, "/home/user/out/x", "/home/user/out/sub/x",
		"/home/user/file", "/home/user/dangling", "/tmp/out/x",
	} {
		tr, err := upload(t, a, p, []byte("pwned"))
		wantReason(t, "upload to "+p, tr, err, ReasonSymlink)
	}
	if _, err := os.Lstat("/etc/" + probe); err == nil {
		os.Remove("/etc/" + probe)
		t.Error("an upload reached /etc")
	}
	if b, _ := os.ReadFile(target); string(b) != "orig" {
		t.Errorf("the file behind a symlink now holds %q", b)
	}
	if fi, err := os.Lstat(filepath.Join(a.Workspace, "file")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Error("the planted symlink was replaced")
	}
}

// A program swapping a workspace directory with a symlink to an outside
// directory (RENAME_EXCHANGE, atomic) while uploads run into it.
func TestUploadSwapRace(t *testing.T) {
	a := newAreas(t, AreasSpec{})
	out := outsideDir(t)
	d, s := filepath.Join(a.Workspace, "d"), filepath.Join(a.Workspace, "s")
	os.Mkdir(d, 0o755)
	os.Symlink(out, s)
	stop := swapLoop(d, s, nil)
	var ok, refused int
	for i := range 50 {
		_, err := upload(t, a, fmt.Sprintf("/home/user/d/sub/f%d", i), []byte("pwned"))
		switch {
		case err == nil:
			ok++
		case ReasonOf(err) == ReasonSymlink || ReasonOf(err) == ReasonNotFound:
			refused++
		default:
			t.Errorf("upload %d: %v", i, err)
		}
	}
	swaps := stop()
	t.Logf("%d uploads landed, %d refused, %d swaps", ok, refused, swaps)
	if swaps == 0 {
		t.Fatal("no swap happened: the test proves nothing")
	}
}

// swapLoop exchanges a and b (RENAME_EXCHANGE, atomic) until the returned
// stop is called, running before ahead of each swap; stop returns how many
// swaps happened. It returns once the first swap is done, so that a loaded
// machine cannot run the whole test before the swapper starts.
func swapLoop(a, b string, before func()) (stop func() int64) {
	var done atomic.Bool
	var swaps atomic.Int64
	var wg sync.WaitGroup
	first := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !done.Load() {
			if before != nil {
				before()
			}
			if unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE) == nil {
				if swaps.Add(1) == 1 {
					close(first)
				}
			}
		}
	}()
	select {
	case <-first:
	case <-time.After(10 * time.Second):
	}
	return func() int64 {
		done.Store(true)
		wg.Wait()
		return swaps.Load()
	}
}

func TestUploadWrites(t *testing.T) {
	a := newAreas(t, AreasSpec{})
	body := []byte("print('hi')\n")
	tr, err := upload(t, a, "/home/user/pkg/mod/m.py", body)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(body)
	want := Transfer{Direction: DirectionUpload, Path: "/home/user/pkg/mod/m.py", Size: int64(len(body)), SHA256: hex.EncodeToString(sum[:]), Decision: DecisionAccepted}
	if tr != want {
		t.Errorf("record %+v, want %+v", tr, want)
	}
	for p, mode := range map[string]uint32{"pkg": 0o755, "pkg/mod": 0o755, "pkg/mod/m.py": 0o644} {
		var st unix.Stat_t
		unix.Lstat(filepath.Join(a.Workspace, p), &st)
		if st.Uid != testUID || st.Gid != testGID || st.Mode&0o7777 != mode {
			t.Errorf("%s: %d:%d %#o, want %d:%d %#o", p, st.Uid, st.Gid, st.Mode&0o7777, testUID, testGID, mode)
		}
	}
	// A relative path is the workspace's; a regular file is replaced.
	if _, err := upload(t, a, "pkg/mod/m.py", []byte("v2")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(a.Workspace, "pkg/mod/m.py")); string(b) != "v2" {
		t.Errorf("replaced file holds %q", b)
	}
	tr, err = upload(t, a, "/home/user/pkg", []byte("x"))
	wantReason(t, "upload over a directory", tr, err, ReasonIsDirectory)
	tr, err = upload(t, a, "/home/user/pkg/mod/m.py/x", []byte("x"))
	wantReason(t, "upload below a file", tr, err, ReasonInvalidPath)
	unix.Mkfifo(filepath.Join(a.Workspace, "fifo"), 0o644)
	tr, err = upload(t, a, "/home/user/fifo", []byte("x"))
	wantReason(t, "upload over a FIFO", tr, err, artifacts.ReasonNotRegular)
	if _, err := upload(t, a, "/tmp/x.txt", body); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(a.Tmp, "x.txt")); !bytes.Equal(b, body) {
		t.Errorf("/tmp upload holds %q", b)
	}
	noTemps(t, a)
}

// noTemps checks that no upload left a temporary file.
func noTemps(t *testing.T, a *Areas) {
	t.Helper()
	for _, root := range []string{a.Workspace, a.Tmp} {
		filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err == nil && strings.HasPrefix(fi.Name(), ".airlock-") {
				t.Errorf("temporary file left: %s", p)
			}
			return nil
		})
	}
}

// countReader counts the bytes taken from it.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n += int64(k)
	return k, err
}

func TestUploadCaps(t *testing.T) {
	a := newAreas(t, AreasSpec{WorkspaceSize: 16 << 20})
	// Over the byte cap: refused while streaming, not after reading it all.
	body := &countReader{r: io.LimitReader(zeroReader{}, 1<<30)}
	tr, err := a.Upload(context.Background(), "/home/user/big", body, 1<<20)
	wantReason(t, "upload over the cap", tr, err, ReasonTooLarge)
	if body.n > 2<<20 {
		t.Errorf("read %d bytes of a body over a 1MiB cap", body.n)
	}
	// Over the space left: the kernel's ENOSPC.
	tr, err = a.Upload(context.Background(), "/home/user/big", io.LimitReader(zeroReader{}, 32<<20), 64<<20)
	wantReason(t, "upload into a full workspace", tr, err, ReasonNoSpace)
	if _, err := os.Lstat(filepath.Join(a.Workspace, "big")); err == nil {
		t.Error("a refused upload left its file")
	}
	noTemps(t, a)
	// The space is back.
	if _, err := a.Upload(context.Background(), "/home/user/ok", io.LimitReader(zeroReader{}, 8<<20), 64<<20); err != nil {
		t.Errorf("after a refused upload: %v", err)
	}
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

func download(t *testing.T, a *Areas, p string) ([]byte, Transfer, error) {
	t.Helper()
	var buf bytes.Buffer
	tr, err := a.Download(context.Background(), p, &buf, SessionDownload(64<<20))
	return buf.Bytes(), tr, err
}

func TestDownloadRefuses(t *testing.T) {
	a := newAreas(t, AreasSpec{})
	w := a.Workspace
	os.Symlink("/etc/shadow", filepath.Join(w, "shadow"))
	os.Symlink("/etc", filepath.Join(w, "etc"))
	unix.Mkfifo(filepath.Join(w, "fifo"), 0o644)
	f, _ := os.Create(filepath.Join(w, "huge.csv"))
	f.Truncate(1 << 40)
	f.Close()
	os.Mkdir(filepath.Join(w, "dir"), 0o755)
	os.WriteFile(filepath.Join(w, "page.py"), []byte("<!DOCTYPE html><html><script>alert(1)</script></html>"), 0o644)
	os.WriteFile(filepath.Join(w, "pic.txt"), []byte(`<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"></svg>`), 0o644)
	os.WriteFile(filepath.Join(w, "a.txt"), []byte("a"), 0o644)
	os.Link(filepath.Join(w, "a.txt"), filepath.Join(w, "b.txt"))
	for _, c := range []struct {
		path string
		want artifacts.Reason
	}{
		{"/home/user/shadow", ReasonSymlink},
		{"/home/user/etc/shadow", ReasonSymlink},
		{"/home/user/fifo", artifacts.ReasonNotRegular},
		{"/home/user/huge.csv", ReasonTooLarge},
		{"/home/user/dir", ReasonIsDirectory},
		{"/home/user", ReasonIsDirectory},
		{"/home/user/page.py", artifacts.ReasonTypeNotAllowed},
		{"/home/user/pic.txt", artifacts.ReasonTypeNotAllowed},
		{"/home/user/b.txt", artifacts.ReasonHardlink},
		{"/home/user/missing", ReasonNotFound},
		{"/home/user/missing/x", ReasonNotFound},
		{"/etc/shadow", ReasonInvalidPath},
		{"../../etc/shadow", ReasonInvalidPath},
		{"/home/user/../../etc/shadow", ReasonInvalidPath},
	} {
		start := time.Now()
		got, tr, err := download(t, a, c.path)
		wantReason(t, "download of "+c.path, tr, err, c.want)
		if len(got) > 0 {
			t.Errorf("download of %s: %d bytes written", c.path, len(got))
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("download of %s took %s", c.path, d)
		}
	}
}

func TestDownload(t *testing.T) {
	a := newAreas(t, AreasSpec{})
	var csv bytes.Buffer
	for i := 0; csv.Len() < 10<<20; i++ {
		fmt.Fprintf(&csv, "%d,%d,row %d\n", i, i*i, i)
	}
	os.WriteFile(filepath.Join(a.Workspace, "data.csv"), csv.Bytes(), 0o644)
	os.WriteFile(filepath.Join(a.Workspace, "m.py"), []byte("import os\nprint(os.getcwd())\n"), 0o644)
	os.WriteFile(filepath.Join(a.Tmp, "s.sh"), []byte("#!/bin/sh\necho hi\n"), 0o644)
	os.WriteFile(filepath.Join(a.Out, "r.json"), []byte(`{"a":1}`), 0o644)
	sum := sha256.Sum256(csv.Bytes())
	for p, want := range map[string]Transfer{
		"/home/user/data.csv": {Size: int64(csv.Len()), SHA256: hex.EncodeToString(sum[:]), MIME: "text/csv"},
		"/home/user/m.py":     {MIME: "text/plain"},
		"/tmp/s.sh":           {MIME: "text/x-shellscript"},
		"/out/r.json":         {MIME: "application/json"},
	} {
		got, tr, err := download(t, a, p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		s := sha256.Sum256(got)
		if tr.SHA256 != hex.EncodeToString(s[:]) || tr.Size != int64(len(got)) || tr.MIME != want.MIME || tr.Path != p ||
			tr.Direction != DirectionDownload || tr.Decision != DecisionAccepted || want.SHA256 != "" && tr.SHA256 != want.SHA256 {
			t.Errorf("%s: record %+v, want %+v (and the sha256 of the %d bytes written)", p, tr, want, len(got))
		}
	}
}

// TestTransferTimes logs upload and download times of one 10MiB file and
// of 1,000 files of 10KB.
func TestTransferTimes(t *testing.T) {
	a := newAreas(t, AreasSpec{})
	big := bytes.Repeat([]byte("0123456789abcdef,\n"), (10<<20)/18)
	small := bytes.Repeat([]byte("abcdefghi\n"), 1000)
	ctx := context.Background()
	start := time.Now()
	if _, err := a.Upload(ctx, "/home/user/big.csv", bytes.NewReader(big), 64<<20); err != nil {
		t.Fatal(err)
	}
	up1 := time.Since(start)
	start = time.Now()
	if _, err := a.Download(ctx, "/home/user/big.csv", io.Discard, SessionDownload(64<<20)); err != nil {
		t.Fatal(err)
	}
	down1 := time.Since(start)
	start = time.Now()
	for i := range 1000 {
		if _, err := a.Upload(ctx, fmt.Sprintf("/home/user/many/%d.txt", i), bytes.NewReader(small), 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	upN := time.Since(start)
	start = time.Now()
	for i := range 1000 {
		if _, err := a.Download(ctx, fmt.Sprintf("/home/user/many/%d.txt", i), io.Discard, SessionDownload(1<<20)); err != nil {
			t.Fatal(err)
		}
	}
	downN := time.Since(start)
	t.Logf("10MiB: upload %v, download %v; 1000×10KB: upload %v, download %v", up1, down1, upN, downN)
}

func TestReasonOf(t *testing.T) {
	if ReasonOf(nil) != "" || ReasonOf(errors.New("x")) != "" {
		t.Error("a plain error has a reason")
	}
	err := fmt.Errorf("wrapped: %w", &TransferError{Reason: ReasonSymlink})
	if ReasonOf(err) != ReasonSymlink {
		t.Error("a wrapped refusal lost its reason")
	}
}

// An area that is no longer mounted is refused: below its mount point is
// airlock's own disk.
func TestTransferRefusesUnmountedArea(t *testing.T) {
	a := newAreas(t, AreasSpec{})
	if err := unix.Unmount(a.Tmp, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := upload(t, a, "/tmp/x", []byte("x")); err == nil {
		t.Error("an upload into an unmounted /tmp was taken")
	}
	if _, err := os.Lstat(filepath.Join(a.Tmp, "x")); err == nil {
		t.Error("the upload landed on the disk below the mount point")
	}
	os.WriteFile(filepath.Join(a.Tmp, "y.txt"), []byte("y"), 0o644)
	if _, _, err := download(t, a, "/tmp/y.txt"); err == nil {
		t.Error("a download from an unmounted /tmp was taken")
	}
}

// A program swapping the final name between a regular file and a symlink
// to an outside file while uploads replace it: the outside file is never
// written.
func TestUploadFinalSwapRace(t *testing.T) {
	a := newAreas(t, AreasSpec{})
	target := filepath.Join(t.TempDir(), "target")
	os.WriteFile(target, []byte("orig"), 0o644)
	f, l := filepath.Join(a.Workspace, "f"), filepath.Join(a.Workspace, "l")
	os.WriteFile(f, []byte("mine"), 0o644)
	os.Symlink(target, l)
	// The upload's rename may take f away: put a link back each time.
	stop := swapLoop(f, l, func() { os.Symlink(target, l) })
	for i := range 50 {
		_, err := upload(t, a, "/home/user/f", []byte("pwned"))
		if err != nil && ReasonOf(err) != ReasonSymlink {
			t.Errorf("upload %d: %v", i, err)
		}
	}
	if stop() == 0 {
		t.Fatal("no swap happened: the test proves nothing")
	}
	if b, _ := os.ReadFile(target); string(b) != "orig" {
		t.Errorf("the file behind the symlink now holds %q", b)
	}
	noTemps(t, a)
}
