package runner

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/artifacts"
)

// decisions collects a tree transfer's records by path.
type decisions struct {
	all    []Transfer
	byPath map[string]Transfer
}

func (d *decisions) add(tr Transfer) {
	if d.byPath == nil {
		d.byPath = map[string]Transfer{}
	}
	d.all = append(d.all, tr)
	d.byPath[tr.Path] = tr
}

// want checks that path was refused for reason.
func (d *decisions) want(t *testing.T, path string, reason artifacts.Reason) {
	t.Helper()
	tr, ok := d.byPath[path]
	switch {
	case !ok:
		t.Errorf("%s: no decision; have %v", path, d.paths())
	case tr.Decision != DecisionRefused || tr.Reason != reason:
		t.Errorf("%s: %s (%s: %s), want refused %s", path, tr.Decision, tr.Reason, tr.Detail, reason)
	}
}

func (d *decisions) paths() []string {
	var ps []string
	for _, tr := range d.all {
		ps = append(ps, tr.Path+"="+string(tr.Reason))
	}
	return ps
}

// tarOf builds a tar stream with one entry per header; a regular file's
// body is its Size bytes of 'x' unless body names it.
func tarOf(t *testing.T, hdrs []*tar.Header, body map[string][]byte) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hdrs {
		if b, ok := body[h.Name]; ok {
			h.Size = int64(len(b))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("%s: %v", h.Name, err)
		}
		if h.Typeflag == tar.TypeReg {
			b, ok := body[h.Name]
			if !ok {
				b = bytes.Repeat([]byte("x"), int(h.Size))
			}
			tw.Write(b)
		}
	}
	tw.Close()
	return &buf
}

// makeHostTree makes the test tree on the host: nested directories, unicode
// names, an empty directory, and n text files of 10KB.
func makeHostTree(t *testing.T, n int) string {
	t.Helper()
	src := t.TempDir()
	for i := range n {
		dir := filepath.Join(src, fmt.Sprintf("d%d", i%10), fmt.Sprintf("sub%d", i%7))
		if i%3 == 0 {
			dir = filepath.Join(src, "données", "日本語")
		}
		os.MkdirAll(dir, 0o755)
		body := bytes.Repeat(fmt.Appendf(nil, "line %d of file %d\n", i, i), 10_000/16)[:10_000]
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d é.txt", i)), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(src, "empty"), 0o755)
	return src
}

// sameTree compares two host trees: the same directories and files, the
// same bytes.
func sameTree(t *testing.T, a, b string) {
	t.Helper()
	list := func(root string) map[string]string {
		m := map[string]string{}
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(root, p)
			if d.IsDir() {
				m[rel] = "dir"
				return nil
			}
			if !d.Type().IsRegular() {
				m[rel] = "odd " + d.Type().String()
				return nil
			}
			body, _ := os.ReadFile(p)
			m[rel] = string(body)
			return nil
		})
		return m
	}
	ma, mb := list(a), list(b)
	if len(ma) != len(mb) {
		t.Errorf("%d entries in %s, %d in %s", len(ma), a, len(mb), b)
	}
	for k, v := range ma {
		if w, ok := mb[k]; !ok || w != v {
			t.Errorf("%s differs (present: %v)", k, ok)
		}
	}
}

// upTree sends the host tree src to dir through TarHostTree and
// UploadTree, as airlock cp does.
func upTree(t *testing.T, a *Areas, src, dir string, lim TreeLimits) (TreeSummary, *decisions, error) {
	t.Helper()
	d := &decisions{}
	pr, pw := io.Pipe()
	host := make(chan []Transfer, 1)
	go func() {
		var refused []Transfer
		err := TarHostTree(context.Background(), src, pw, dir, lim.FileBytes, func(tr Transfer) { refused = append(refused, tr) })
		pw.CloseWithError(err)
		host <- refused
	}()
	sum, err := a.UploadTree(context.Background(), dir, pr, lim, d.add)
	pr.CloseWithError(errors.New("upload over"))
	for _, tr := range <-host {
		d.add(tr)
	}
	return sum, d, err
}

func downTree(t *testing.T, a *Areas, dir, dst string, opt DownloadOptions) (TreeSummary, *decisions, error) {
	t.Helper()
	dest, err := artifacts.OpenDest(dst)
	if err != nil {
		t.Fatal(err)
	}
	defer dest.Close()
	d := &decisions{}
	sum, err := a.DownloadTree(context.Background(), dir, DestSink(dest), opt, SessionTree(1<<30), d.add)
	return sum, d, err
}

func TestTreeRoundTrip(t *testing.T) {
	a := newAreas(t, AreasSpec{})
	src := makeHostTree(t, 1000)
	sum, d, err := upTree(t, a, src, "/home/user/proj", SessionTree(1<<30))
	if err != nil || sum.Files != 1000 || sum.Refused != 0 || sum.Bytes != 1000*10_000 {
		t.Fatalf("upload: %+v, %v; %v", sum, err, d.paths()[:min(5, len(d.all))])
	}
	for _, tr := range d.all {
		if tr.Decision != DecisionAccepted || tr.SHA256 == "" || !strings.HasPrefix(tr.Path, "/home/user/proj/") {
			t.Fatalf("upload record %+v", tr)
		}
	}
	sameTree(t, src, filepath.Join(a.Workspace, "proj"))
	// Everything uploaded is the sandbox's user's.
	filepath.WalkDir(filepath.Join(a.Workspace, "proj"), func(p string, _ fs.DirEntry, _ error) error {
		var st unix.Stat_t
		unix.Lstat(p, &st)
		if st.Uid != testUID || st.Gid != testGID {
			t.Fatalf("%s is owned by %d:%d", p, st.Uid, st.Gid)
		}
		return nil
	})
	noTemps(t, a)

	dst := t.TempDir()
	dsum, dd, err := downTree(t, a, "/home/user/proj", dst, SessionDownload(1<<30))
	if err != nil || dsum.Files != 1000 || dsum.Refused != 0 {
		t.Fatalf("download: %+v, %v; %v", dsum, err, dd.paths()[:min(5, len(dd.all))])
	}
	sameTree(t, src, dst)

	// A second download into the same place replaces nothing.
	dsum, dd, err = downTree(t, a, "/home/user/proj", dst, SessionDownload(1<<30))
	if err != nil || dsum.Files != 0 || dsum.Refused != 1000 {
		t.Fatalf("download again: %+v, %v", dsum, err)
	}
}

func TestUploadTreeHostileEntries(t *testing.T) {
	a := newAreas(t, AreasSpec{})
	outside := outsideDir(t)
	// A symlink the program planted in the target, to a host directory.
	os.MkdirAll(filepath.Join(a.Workspace, "t"), 0o755)
	os.Symlink(outside, filepath.Join(a.Workspace, "t", "planted"))
	os.Symlink(outside, filepath.Join(a.Workspace, "t", "plantedfile"))
	hdrs := []*tar.Header{
		{Typeflag: tar.TypeDir, Name: "./"},
		{Typeflag: tar.TypeReg, Name: "./ok.txt"},
		{Typeflag: tar.TypeDir, Name: "empty/"},
		{Typeflag: tar.TypeReg, Name: "deep/er/ok.txt"},
		{Typeflag: tar.TypeSymlink, Name: "link", Linkname: outside},
		{Typeflag: tar.TypeLink, Name: "hard", Linkname: "ok.txt"},
		{Typeflag: tar.TypeFifo, Name: "fifo"},
		{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3},
		{Typeflag: tar.TypeBlock, Name: "sda", Devmajor: 8},
		{Typeflag: tar.TypeReg, Name: "../escape.txt"},
		{Typeflag: tar.TypeReg, Name: "a/../../escape2.txt"},
		{Typeflag: tar.TypeReg, Name: outside + "/abs.txt"},
		{Typeflag: tar.TypeDir, Name: "/abs/"},
		{Typeflag: tar.TypeReg, Name: "big.bin", Size: 5000},
		{Typeflag: tar.TypeReg, Name: ".airlock-upload-x"},
		{Typeflag: tar.TypeReg, Name: "planted/x.txt"},
		{Typeflag: tar.TypeReg, Name: "plantedfile"},
		{Typeflag: 'V', Name: "volume"},
		{Typeflag: tar.TypeReg, Name: "after.txt"},
	}
	buf := tarOf(t, hdrs, map[string][]byte{"./ok.txt": []byte("ok\n"), "deep/er/ok.txt": []byte("deep\n"), "after.txt": []byte("after\n")})
	d := &decisions{}
	sum, err := a.UploadTree(context.Background(), "/home/user/t", buf, TreeLimits{Files: 100, Bytes: 1 << 20, FileBytes: 4096}, d.add)
	if err != nil {
		t.Fatal(err)
	}
	if sum.Files != 3 || sum.Dirs != 1 {
		t.Errorf("summary %+v, want 3 files and 1 directory", sum)
	}
	for p, r := range map[string]artifacts.Reason{
		"link": ReasonSymlink, "hard": artifacts.ReasonHardlink, "fifo": artifacts.ReasonNotRegular,
		"null": artifacts.ReasonNotRegular, "sda": artifacts.ReasonNotRegular,
		"../escape.txt": ReasonInvalidPath, "a/../../escape2.txt": ReasonInvalidPath,
		outside + "/abs.txt": ReasonInvalidPath, "/abs/": ReasonInvalidPath,
		"big.bin": ReasonTooLarge, ".airlock-upload-x": ReasonInvalidPath,
		"planted/x.txt": ReasonSymlink, "plantedfile": ReasonSymlink, "volume": artifacts.ReasonNotRegular,
	} {
		d.want(t, treePath("/home/user/t", p), r)
	}
	var got []string
	filepath.WalkDir(a.Workspace, func(p string, e fs.DirEntry, _ error) error {
		rel, _ := filepath.Rel(a.Workspace, p)
		got = append(got, rel+":"+e.Type().String())
		return nil
	})
	want := []string{".:d---------", "t:d---------", "t/after.txt:----------", "t/deep:d---------", "t/deep/er:d---------",
		"t/deep/er/ok.txt:----------", "t/empty:d---------", "t/ok.txt:----------", "t/planted:L---------", "t/plantedfile:L---------"}
	if !slices.Equal(got, want) {
		t.Errorf("the workspace holds\n%v\nwant\n%v", got, want)
	}
	if b, _ := os.ReadFile(filepath.Join(a.Workspace, "t", "after.txt")); string(b) != "after\n" {
		t.Errorf("after.txt holds %q", b)
	}
	if ents, _ := os.ReadDir(a.Tmp); len(ents) > 0 {
		t.Errorf("/tmp holds %v", ents)
	}
	onlyInAreas(t, a)
	noTemps(t, a)
}

func TestUploadTreeRefusesTargets(t *testing.T) {
	a := newAreas(t, AreasSpec{})
	outside := outsideDir(t)
	os.Symlink(outside, filepath.Join(a.Workspace, "link"))
	for _, c := range []struct {
		dir  string
		want artifacts.Reason
	}{
		{"/etc", ReasonInvalidPath},
		{"/home/user/../../etc", ReasonInvalidPath},
		{"/home/user/link", ReasonSymlink},
		{"/home/user/link/sub", ReasonSymlink},
		{"/out/x", ReasonInvalidPath},
	} {
		buf := tarOf(t, []*tar.Header{{Typeflag: tar.TypeReg, Name: "a.txt", Size: 1}}, nil)
		_, err := a.UploadTree(context.Background(), c.dir, buf, SessionTree(1<<20), nil)
		if ReasonOf(err) != c.want {
			t.Errorf("upload to %s: %v, want %s", c.dir, err, c.want)
		}
	}
}

// bomb streams n empty file entries, never buffering them.
func bomb(n int) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		for i := range n {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("e%07d", i), Mode: 0o644}); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(tw.Close())
	}()
	return pr
}

func TestUploadTreeCaps(t *testing.T) {
	a := newAreas(t, AreasSpec{})

	// A million empty entries: stopped at the count cap.
	cr := &countReader{r: bomb(1_000_000)}
	d := &decisions{}
	sum, err := a.UploadTree(context.Background(), "/tmp/bomb", cr, TreeLimits{Files: 500, Bytes: 1 << 20, FileBytes: 1 << 20}, d.add)
	if ReasonOf(err) != artifacts.ReasonTooMany || sum.Files != 500 || sum.Stopped != artifacts.ReasonTooMany {
		t.Errorf("a million entries: %+v, %v", sum, err)
	}
	d.want(t, "/tmp/bomb/e0000500", artifacts.ReasonTooMany)
	if cr.n > 600*1024 {
		t.Errorf("%d bytes read for 500 entries", cr.n)
	}
	if ents, _ := os.ReadDir(filepath.Join(a.Tmp, "bomb")); len(ents) != 500 {
		t.Errorf("%d files written, want 500", len(ents))
	}

	// One entry claiming 1TB: stopped at its header, nothing of it written.
	var hdr bytes.Buffer
	tw := tar.NewWriter(&hdr)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "small.txt", Mode: 0o644, Size: 2})
	tw.Write([]byte("hi"))
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "tera.bin", Mode: 0o644, Size: 1 << 40})
	cr = &countReader{r: io.MultiReader(&hdr, zeroReader{})}
	d = &decisions{}
	sum, err = a.UploadTree(context.Background(), "/home/user/tb", cr, SessionTree(1<<20), d.add)
	if ReasonOf(err) != ReasonTooLarge || sum.Files != 1 {
		t.Errorf("a 1TB entry: %+v, %v", sum, err)
	}
	d.want(t, "/home/user/tb/tera.bin", ReasonTooLarge)
	if cr.n > 64<<10 {
		t.Errorf("%d bytes read of a stream whose second entry claims 1TB", cr.n)
	}
	if _, err := os.Lstat(filepath.Join(a.Workspace, "tb", "tera.bin")); err == nil {
		t.Error("tera.bin was made")
	}

	// Headers past their allowance: PAX records of 50KB an entry.
	var pax bytes.Buffer
	tw = tar.NewWriter(&pax)
	for i := range 5 {
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("p%d.txt", i), Mode: 0o644, Format: tar.FormatPAX,
			PAXRecords: map[string]string{"comment": strings.Repeat("c", 50_000)}})
	}
	tw.Close()
	d = &decisions{}
	sum, err = a.UploadTree(context.Background(), "/home/user/pax", &pax, TreeLimits{Files: 10, Bytes: 1024, FileBytes: 1024}, d.add)
	if ReasonOf(err) != ReasonTooLarge || sum.Stopped != ReasonTooLarge || sum.Files != 1 {
		t.Errorf("headers past their allowance: %+v, %v", sum, err)
	}

	// Files over the file cap within the stream's cap are skipped; the
	// stream goes on.
	buf := tarOf(t, []*tar.Header{{Typeflag: tar.TypeReg, Name: "a.bin", Size: 3000}, {Typeflag: tar.TypeReg, Name: "b.txt", Size: 10}}, nil)
	sum, err = a.UploadTree(context.Background(), "/home/user/fc", buf, TreeLimits{Files: 10, Bytes: 1 << 20, FileBytes: 1000}, nil)
	if err != nil || sum.Files != 1 || sum.Refused != 1 {
		t.Errorf("a file over the file cap: %+v, %v", sum, err)
	}

	// A stream cut inside an entry is refused, and leaves no temporary.
	buf = tarOf(t, []*tar.Header{{Typeflag: tar.TypeReg, Name: "cut.txt", Size: 4096}}, nil)
	_, err = a.UploadTree(context.Background(), "/home/user/cut", io.LimitReader(buf, 1024), SessionTree(1<<20), nil)
	if err == nil {
		t.Error("a cut stream was accepted")
	}
	if _, err := a.UploadTree(context.Background(), "/home/user/junk", strings.NewReader(strings.Repeat("not a tar", 100)), SessionTree(1<<20), nil); err == nil {
		t.Error("a stream that is not tar was accepted")
	}
	noTemps(t, a)

	// A full area refuses each file no_space.
	small := newAreas(t, AreasSpec{TmpSize: 1 << 20})
	buf = tarOf(t, []*tar.Header{{Typeflag: tar.TypeReg, Name: "a.bin", Size: 600 << 10}, {Typeflag: tar.TypeReg, Name: "b.bin", Size: 600 << 10}}, nil)
	d = &decisions{}
	sum, err = small.UploadTree(context.Background(), "/tmp/full", buf, SessionTree(16<<20), d.add)
	if err != nil || sum.Files != 1 {
		t.Errorf("into a full /tmp: %+v, %v", sum, err)
	}
	d.want(t, "/tmp/full/b.bin", ReasonNoSpace)
}

func TestTarHostTreeFollowsNothing(t *testing.T) {
	a := newAreas(t, AreasSpec{})
	secret := filepath.Join(t.TempDir(), "secret.txt")
	os.WriteFile(secret, []byte("host secret\n"), 0o600)
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "ok.txt"), []byte("ok\n"), 0o644)
	os.Symlink(secret, filepath.Join(src, "link.txt"))
	os.Symlink(filepath.Dir(secret), filepath.Join(src, "linkdir"))
	unix.Mkfifo(filepath.Join(src, "fifo"), 0o644)
	l, err := net.Listen("unix", filepath.Join(src, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	os.Link(filepath.Join(src, "ok.txt"), filepath.Join(src, "hard.txt"))
	os.WriteFile(filepath.Join(src, "big.bin"), make([]byte, 2<<20), 0o644)
	sum, d, err := upTree(t, a, src, "/home/user/up", TreeLimits{Files: 100, Bytes: 1 << 20, FileBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	d.want(t, "/home/user/up/link.txt", ReasonSymlink)
	d.want(t, "/home/user/up/linkdir", ReasonSymlink)
	d.want(t, "/home/user/up/fifo", artifacts.ReasonNotRegular)
	d.want(t, "/home/user/up/sock", artifacts.ReasonNotRegular)
	d.want(t, "/home/user/up/big.bin", ReasonTooLarge) // on this machine, unread
	// A hardlinked file on this machine is read like any other: nothing
	// is followed, and the sandbox gets a file of its own.
	if sum.Files != 2 || len(d.all) != 7 {
		t.Errorf("summary %+v, decisions %v", sum, d.paths())
	}
	ents, _ := os.ReadDir(filepath.Join(a.Workspace, "up"))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"hard.txt", "ok.txt"}) {
		t.Errorf("uploaded %v", names)
	}
	if err := TarHostTree(context.Background(), filepath.Join(src, "linkdir"), io.Discard, "/x", 0, nil); err == nil {
		t.Error("a symlinked source was followed")
	}
}

func TestDownloadTreeHostileEntries(t *testing.T) {
	a := newAreas(t, AreasSpec{})
	w := filepath.Join(a.Workspace, "t")
	os.MkdirAll(filepath.Join(w, "sub", "empty"), 0o755)
	os.MkdirAll(filepath.Join(w, ".git"), 0o755)
	os.WriteFile(filepath.Join(w, ".git", "config"), []byte("x\n"), 0o644)
	os.WriteFile(filepath.Join(w, ".env"), []byte("A=1\n"), 0o644)
	os.WriteFile(filepath.Join(w, "ok.txt"), []byte("ok\n"), 0o644)
	os.WriteFile(filepath.Join(w, "sub", "ok.csv"), []byte("a,b\n1,2\n"), 0o644)
	os.Symlink("/etc/shadow", filepath.Join(w, "shadow"))
	os.Symlink("/etc", filepath.Join(w, "etc"))
	unix.Mkfifo(filepath.Join(w, "fifo"), 0o644)
	os.Link(filepath.Join(w, "ok.txt"), filepath.Join(w, "hard.txt"))
	f, _ := os.Create(filepath.Join(w, "huge.csv"))
	f.Truncate(1 << 40)
	f.Close()
	os.WriteFile(filepath.Join(w, "page.txt"), []byte("<!DOCTYPE html><html><script>alert(1)</script></html>"), 0o644)
	os.WriteFile(filepath.Join(w, "taken.txt"), []byte("new\n"), 0o644)

	dst := t.TempDir()
	os.WriteFile(filepath.Join(dst, "taken.txt"), []byte("mine\n"), 0o644)
	outside := outsideDir(t)
	os.Symlink(outside, filepath.Join(dst, "sub"))

	sum, d, err := downTree(t, a, "/home/user/t", dst, SessionDownload(1<<30))
	if err != nil {
		t.Fatal(err)
	}
	for p, r := range map[string]artifacts.Reason{
		".git": artifacts.ReasonHiddenName, ".env": artifacts.ReasonHiddenName, "shadow": ReasonSymlink, "etc": ReasonSymlink,
		"fifo": artifacts.ReasonNotRegular, "hard.txt": artifacts.ReasonHardlink, "huge.csv": ReasonTooLarge,
		"page.txt": artifacts.ReasonTypeNotAllowed, "taken.txt": artifacts.ReasonExists, "sub": artifacts.ReasonExists,
	} {
		d.want(t, treePath("/home/user/t", p), r)
	}
	// ok.txt's other link makes both refused.
	d.want(t, "/home/user/t/ok.txt", artifacts.ReasonHardlink)
	if sum.Files != 0 {
		t.Errorf("summary %+v", sum)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "taken.txt")); string(b) != "mine\n" {
		t.Errorf("taken.txt was replaced: %q", b)
	}
	ents, _ := os.ReadDir(dst)
	if len(ents) != 2 {
		t.Errorf("the destination holds %v", ents)
	}

	// Dotfiles when asked; the tree's own bytes cap.
	opt := SessionDownload(1 << 30)
	opt.AllowDotfiles = true
	dst2 := t.TempDir()
	dest, _ := artifacts.OpenDest(dst2)
	defer dest.Close()
	d = &decisions{}
	sum, err = a.DownloadTree(context.Background(), "/home/user/t", DestSink(dest), opt, TreeLimits{Files: 100, Bytes: 10, FileBytes: 1 << 20}, d.add)
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(dst2, ".git", "config")); string(b) != "x\n" {
		t.Errorf(".git/config: %q", b)
	}
	if _, err := os.Stat(filepath.Join(dst2, "sub", "empty")); err != nil {
		t.Errorf("the empty directory: %v", err)
	}
	d.want(t, "/home/user/t/sub/ok.csv", ReasonTooLarge) // 4+2+4 bytes before it fill the cap

	// The count cap stops the walk.
	d = &decisions{}
	_, err = a.DownloadTree(context.Background(), "/home/user/t", DestSink(dest), opt, TreeLimits{Files: 3, Bytes: 1 << 20, FileBytes: 1 << 20}, d.add)
	if ReasonOf(err) != artifacts.ReasonTooMany {
		t.Errorf("past the count cap: %v", err)
	}

	// Sources that are not a tree.
	for p, want := range map[string]artifacts.Reason{
		"/home/user/t/ok.txt": ReasonInvalidPath, "/home/user/t/etc": ReasonSymlink, "/home/user/nope": ReasonNotFound,
		"/home/user/t/.git": artifacts.ReasonHiddenName, "/etc": ReasonInvalidPath,
	} {
		_, _, err := downTree(t, a, p, t.TempDir(), SessionDownload(1<<30))
		if ReasonOf(err) != want {
			t.Errorf("download of %s: %v, want %s", p, err, want)
		}
	}
}

func TestTarSink(t *testing.T) {
	a := newAreas(t, AreasSpec{})
	src := makeHostTree(t, 50)
	if _, _, err := upTree(t, a, src, "/tmp/x", SessionTree(1<<30)); err != nil {
		t.Fatal(err)
	}
	os.Symlink("/etc/passwd", filepath.Join(a.Tmp, "x", "link"))
	spool, err := os.CreateTemp(t.TempDir(), "spool")
	if err != nil {
		t.Fatal(err)
	}
	defer spool.Close()
	var out bytes.Buffer
	sink := NewTarSink(&out, spool)
	d := &decisions{}
	sum, err := a.DownloadTree(context.Background(), "/tmp/x", sink, SessionDownload(1<<30), SessionTree(1<<30), d.add)
	if err != nil || sink.Close() != nil || sum.Files != 50 || sum.Refused != 1 {
		t.Fatalf("%+v, %v", sum, err)
	}
	d.want(t, "/tmp/x/link", ReasonSymlink)
	// The stream goes up again as it came.
	if _, err := a.UploadTree(context.Background(), "/home/user/again", &out, SessionTree(1<<30), nil); err != nil {
		t.Fatal(err)
	}
	sameTree(t, src, filepath.Join(a.Workspace, "again"))
}

func TestIsDir(t *testing.T) {
	a := newAreas(t, AreasSpec{})
	os.MkdirAll(filepath.Join(a.Workspace, "d"), 0o755)
	os.WriteFile(filepath.Join(a.Workspace, "f"), nil, 0o644)
	os.Symlink("/etc", filepath.Join(a.Workspace, "l"))
	for p, want := range map[string]bool{"/home/user/d": true, "/home/user": true, "/tmp": true, "/home/user/f": false, "/home/user/none": false} {
		if got, err := a.IsDir(p); err != nil || got != want {
			t.Errorf("IsDir(%s) = %v, %v", p, got, err)
		}
	}
	for _, p := range []string{"/home/user/l", "/etc", "../x"} {
		if _, err := a.IsDir(p); err == nil {
			t.Errorf("IsDir(%s) did not refuse", p)
		}
	}
}

// A program swapping a directory of the target with a symlink to the host
// while a tree streams in: entries land in the area or are refused, never
// through the link.
func TestUploadTreeSwapRace(t *testing.T) {
	a := newAreas(t, AreasSpec{})
	out := outsideDir(t)
	d, s := filepath.Join(a.Workspace, "t", "d"), filepath.Join(a.Workspace, "t", "s")
	os.MkdirAll(d, 0o755)
	os.Symlink(out, s)
	stop := swapLoop(d, s, nil)
	var hdrs []*tar.Header
	for i := range 300 {
		hdrs = append(hdrs, &tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("d/sub%d/f.txt", i%7), Size: 5})
	}
	d2 := &decisions{}
	_, err := a.UploadTree(context.Background(), "/home/user/t", tarOf(t, hdrs, nil), SessionTree(1<<20), d2.add)
	swaps := stop()
	if err != nil {
		t.Fatal(err)
	}
	var ok int
	for _, tr := range d2.all {
		switch {
		case tr.Decision == DecisionAccepted:
			ok++
		case tr.Reason != ReasonSymlink && tr.Reason != ReasonNotFound:
			t.Errorf("%s: %s %s", tr.Path, tr.Reason, tr.Detail)
		}
	}
	t.Logf("%d of %d entries landed, %d swaps", ok, len(d2.all), swaps)
	if swaps == 0 {
		t.Fatal("no swap happened: the test proves nothing")
	}
}
