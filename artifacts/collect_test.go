package artifacts

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"image"
	"image/color"
	"image/png"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"unicode/utf8"
)

func pngBytes(t *testing.T) []byte {
	t.Helper()
	img := image.NewRGBA(image.Rect(0, 0, 4, 4))
	img.Set(1, 1, color.RGBA{255, 0, 0, 255})
	var b bytes.Buffer
	if err := png.Encode(&b, img); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// elfBytes is the start of a real ELF executable: the detector needs only
// the header.
func elfBytes(t *testing.T) []byte {
	t.Helper()
	exe, err := os.ReadFile("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	return exe[:512]
}

type tree struct {
	t   *testing.T
	dir string
}

func (tr tree) file(name string, data []byte, mode os.FileMode) {
	tr.t.Helper()
	p := filepath.Join(tr.dir, name)
	os.MkdirAll(filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, data, mode); err != nil {
		tr.t.Fatal(err)
	}
	os.Chmod(p, mode) // WriteFile honours umask; setuid needs chmod
}

func TestCollectCraftedTree(t *testing.T) {
	src, dest, quar := t.TempDir(), t.TempDir(), t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(outside, []byte("host secret"), 0o600)
	tr := tree{t, src}

	pngData := pngBytes(t)
	tr.file("plot.png", pngData, 0o644)
	tr.file("data.csv", []byte("a,b\n1,2\n3,4\n"), 0o644)
	tr.file("notes.txt", []byte("hello\n"), 0o644)
	tr.file("result.json", []byte(`{"ok": true}`), 0o644)
	tr.file("sub/deep/report.txt", []byte("deep\n"), 0o644)
	tr.file("setuid.txt", []byte("mode bits\n"), 0o4755|os.ModeSetuid)
	tr.file("x.png", elfBytes(t), 0o755)
	tr.file("x.txt", []byte("<!DOCTYPE html><html><body><script>alert(1)</script></body></html>"), 0o644)
	tr.file("picture.txt", pngData, 0o644)
	tr.file("big.txt", bytes.Repeat([]byte("a"), 2048), 0o644)
	tr.file("bad\nname.txt", []byte("newline\n"), 0o644)
	tr.file("bad\x1b[31m.txt", []byte("escape\n"), 0o644)
	tr.file("bad\xff.txt", []byte("latin1\n"), 0o644)
	os.Symlink(outside, filepath.Join(src, "shadow"))
	os.Symlink("/etc", filepath.Join(src, "etcdir"))
	tr.file("linked.txt", []byte("two names\n"), 0o644)
	os.Link(filepath.Join(src, "linked.txt"), filepath.Join(src, "linked2.txt"))
	if err := syscall.Mkfifo(filepath.Join(src, "pipe"), 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", filepath.Join(src, "sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sparse, _ := os.Create(filepath.Join(src, "sparse.txt"))
	sparse.Truncate(1 << 40)
	sparse.Close()

	rep, err := Collect(context.Background(), src, Options{
		Dest: dest, Quarantine: quar, MaxFileBytes: 1024, MaxTotalBytes: 1 << 20, MaxFiles: 100,
	})
	if err != nil {
		t.Fatal(err)
	}

	accepted := map[string]Artifact{}
	for _, a := range rep.Artifacts {
		accepted[a.Path] = a
	}
	for path, mime := range map[string]string{
		"plot.png": "image/png", "data.csv": "text/csv", "notes.txt": "text/plain",
		"result.json": "application/json", "sub/deep/report.txt": "text/plain", "setuid.txt": "text/plain",
	} {
		a, ok := accepted[path]
		if !ok {
			t.Errorf("%s not accepted", path)
			continue
		}
		if a.MIME != mime {
			t.Errorf("%s: mime %q, want %q", path, a.MIME, mime)
		}
		data, err := os.ReadFile(filepath.Join(dest, path))
		if err != nil {
			t.Errorf("%s not delivered: %v", path, err)
			continue
		}
		sum := sha256.Sum256(data)
		if a.SHA256 != hex.EncodeToString(sum[:]) || a.Size != int64(len(data)) {
			t.Errorf("%s: sha256/size do not match the delivered file", path)
		}
		fi, _ := os.Stat(filepath.Join(dest, path))
		if fi.Mode() != 0o644 {
			t.Errorf("%s delivered with mode %v, want 0644 and no setuid", path, fi.Mode())
		}
	}
	if len(rep.Artifacts) != 6 {
		t.Errorf("accepted %d files: %+v", len(rep.Artifacts), rep.Artifacts)
	}

	rejected := map[string]Reason{}
	for _, r := range rep.Rejected {
		rejected[r.Path] = r.Reason
		if !utf8.ValidString(r.Path) || strings.ContainsAny(r.Path, "\n\x1b") {
			t.Errorf("rejected path shown unescaped: %q", r.Path)
		}
	}
	for path, want := range map[string]Reason{
		"shadow":          ReasonSymlink,
		"etcdir":          ReasonSymlink,
		"linked.txt":      ReasonHardlink,
		"linked2.txt":     ReasonHardlink,
		"pipe":            ReasonNotRegular,
		"sock":            ReasonNotRegular,
		"sparse.txt":      ReasonTooLarge,
		"big.txt":         ReasonTooLarge,
		"x.png":           ReasonTypeNotAllowed,
		"x.txt":           ReasonTypeNotAllowed,
		"picture.txt":     ReasonTypeMismatch,
		`bad\x0aname.txt`: ReasonBadName,
		`bad\x1b[31m.txt`: ReasonBadName,
		`bad\xff.txt`:     ReasonBadName,
	} {
		if got := rejected[path]; got != want {
			t.Errorf("%q: reason %q, want %q", path, got, want)
		}
	}

	// Nothing but accepted files (and their directories) reached dest.
	filepath.Walk(dest, func(p string, fi os.FileInfo, err error) error {
		rel, _ := filepath.Rel(dest, p)
		if fi.Mode().IsRegular() {
			if _, ok := accepted[filepath.ToSlash(rel)]; !ok {
				t.Errorf("unexpected file delivered: %s", rel)
			}
		}
		return nil
	})
	// The host file behind the symlink was never copied anywhere.
	for _, d := range []string{dest, quar} {
		filepath.Walk(d, func(p string, fi os.FileInfo, err error) error {
			if data, _ := os.ReadFile(p); fi.Mode().IsRegular() && bytes.Contains(data, []byte("host secret")) {
				t.Errorf("%s holds the symlink target's content", p)
			}
			return nil
		})
	}
	// Readable rejects are quarantined under escaped names.
	for _, name := range []string{"x.png", "x.txt", "picture.txt", `bad\x0aname.txt`} {
		if _, err := os.Stat(filepath.Join(quar, name)); err != nil {
			t.Errorf("%s not quarantined: %v", name, err)
		}
	}
}

// Device nodes need root to make; `make test` runs as root, so CI runs this.
func TestCollectRejectsDevicesUnopened(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mknod needs root; `make test` runs this as root")
	}
	src := t.TempDir()
	// A character device that would block or misbehave if opened: /dev/tty's numbers.
	if err := syscall.Mknod(filepath.Join(src, "tty"), syscall.S_IFCHR|0o666, 5<<8|0); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mknod(filepath.Join(src, "blk"), syscall.S_IFBLK|0o600, 7<<8|0); err != nil {
		t.Fatal(err)
	}
	rep, err := Collect(context.Background(), src, Options{Dest: t.TempDir(), MaxFileBytes: 10, MaxTotalBytes: 10, MaxFiles: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rejected) != 2 || rep.Rejected[0].Reason != ReasonNotRegular || rep.Rejected[1].Reason != ReasonNotRegular {
		t.Errorf("rejected %+v", rep.Rejected)
	}
}

func TestCollectCaps(t *testing.T) {
	src := t.TempDir()
	tr := tree{t, src}
	for i := 0; i < 10; i++ {
		tr.file(filepath.Join("many", string(rune('a'+i))+".txt"), []byte("0123456789"), 0o644)
	}
	rep, err := Collect(context.Background(), src, Options{MaxFileBytes: 100, MaxTotalBytes: 35, MaxFiles: 5})
	if err != nil {
		t.Fatal(err)
	}
	// The total cap admits three files; then the byte cap, then the count cap.
	if len(rep.Artifacts) != 3 {
		t.Errorf("accepted %d, want 3: %+v", len(rep.Artifacts), rep.Artifacts)
	}
	var tooLarge, tooMany int
	for _, r := range rep.Rejected {
		switch r.Reason {
		case ReasonTooLarge:
			tooLarge++
		case ReasonTooMany:
			tooMany++
		}
	}
	if tooLarge != 2 || tooMany != 5 {
		t.Errorf("too_large %d too_many %d: %+v", tooLarge, tooMany, rep.Rejected)
	}
}

func TestCollectDestinationSymlinkCannotEscape(t *testing.T) {
	src, dest, outside := t.TempDir(), t.TempDir(), t.TempDir()
	tree{t, src}.file("sub/a.txt", []byte("x\n"), 0o644)
	// A symlink planted in the destination must not redirect delivery.
	os.Symlink(outside, filepath.Join(dest, "sub"))
	rep, err := Collect(context.Background(), src, Options{Dest: dest, MaxFileBytes: 10, MaxTotalBytes: 10, MaxFiles: 10})
	if err != nil || len(rep.Rejected) != 1 || rep.Rejected[0].Reason != ReasonExists {
		t.Errorf("delivery through a destination symlink: %v, rejected %+v", err, rep.Rejected)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Errorf("wrote outside the destination: %v", ents)
	}
}

func TestCollectRefusesBadOptions(t *testing.T) {
	for _, o := range []Options{
		{MaxFileBytes: 0, MaxTotalBytes: 1, MaxFiles: 1},
		{MaxFileBytes: 1, MaxTotalBytes: 1, MaxFiles: 1, Types: []string{"image/nonsense"}},
	} {
		if _, err := Collect(context.Background(), t.TempDir(), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}

func TestCheckName(t *testing.T) {
	for name, ok := range map[string]bool{
		"plot.png": true, "résumé.txt": true, "with space.txt": true, "日本.csv": true,
		"": false, ".": false, "..": false, "a\nb": false, "a\tb": false, "\x1b[2J": false,
		"a\xffb": false, "a\u202eb": false, ".airlock-123": false, strings.Repeat("a", 256): false,
	} {
		if got := checkName(name) == ""; got != ok {
			t.Errorf("checkName(%q) ok=%v, want %v", name, got, ok)
		}
	}
}

func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"plot.png", "a\nb", "\xff", "..", "\u202e", "a\\b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		e := Escape(name)
		if !utf8.ValidString(e) {
			t.Fatalf("Escape(%q) = %q is not UTF-8", name, e)
		}
		for _, r := range e {
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) {
				t.Fatalf("Escape(%q) = %q keeps a control character", name, e)
			}
		}
		for _, part := range strings.Split(quarantineName(e), "/") {
			if strings.HasPrefix(part, ".") {
				t.Fatalf("quarantine name of %q has a dot component: %q", name, quarantineName(e))
			}
		}
		if checkName(name) == "" {
			if e != name {
				t.Fatalf("accepted name %q is shown as %q", name, e)
			}
			if strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
				t.Fatalf("accepted unsafe name %q", name)
			}
		}
	})
}

// TestSparseNotRead: files of holes, each within the file cap, are
// refused without being read or quarantined: the host never reads,
// hashes or keeps more than the sandbox stored.
func TestSparseNotRead(t *testing.T) {
	src, dest, quar := t.TempDir(), t.TempDir(), t.TempDir()
	const n, size = 20, 8 << 20
	for i := range n {
		f, err := os.Create(filepath.Join(src, "f"+strconv.Itoa(i)+".txt"))
		if err != nil {
			t.Fatal(err)
		}
		f.Truncate(size)
		f.Close()
	}
	os.WriteFile(filepath.Join(src, "written.txt"), bytes.Repeat([]byte("w"), 8192), 0o644)
	rep, err := Collect(context.Background(), src, Options{Dest: dest, Quarantine: quar, MaxFileBytes: size, MaxTotalBytes: size, MaxFiles: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Artifacts) != 1 || rep.Artifacts[0].Path != "written.txt" {
		t.Errorf("artifacts %+v, want written.txt alone", rep.Artifacts)
	}
	sparse := 0
	for _, r := range rep.Rejected {
		if r.Reason == ReasonTooLarge && strings.Contains(r.Detail, "sparse") && r.Quarantined == "" {
			sparse++
		}
	}
	if sparse != n || len(rep.Rejected) != n {
		t.Errorf("%d sparse files refused unread, want %d: %+v", sparse, n, rep.Rejected)
	}
	if held := treeBytes(t, quar); held != 0 {
		t.Errorf("the quarantine holds %d bytes", held)
	}
}

// TestBadNamesCounted: badly named files count against the file cap
// before they are quarantined.
func TestBadNamesCounted(t *testing.T) {
	src, quar := t.TempDir(), t.TempDir()
	for i := range 5 {
		os.WriteFile(filepath.Join(src, "bad\x01"+strconv.Itoa(i)), []byte("x"), 0o644)
	}
	rep, err := Collect(context.Background(), src, Options{Quarantine: quar, MaxFileBytes: 1 << 20, MaxTotalBytes: 1 << 20, MaxFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	quarantined := 0
	for _, r := range rep.Rejected {
		if r.Quarantined != "" {
			quarantined++
		}
	}
	if len(rep.Rejected) != 5 || quarantined != 2 || treeBytes(t, quar) != 2 {
		t.Errorf("%d refused, %d quarantined (%d bytes); want 5, the 2 the file cap allows: %+v", len(rep.Rejected), quarantined, treeBytes(t, quar), rep.Rejected)
	}
}

// treeBytes is the bytes of the regular files under dir.
func treeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}
