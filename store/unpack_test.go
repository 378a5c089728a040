package store

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

var mtime = time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)

// ent is one tar entry; the constructors below fill in the usual fields.
type ent struct {
	h    tar.Header
	body string
}

func reg(name, body string) ent {
	return ent{tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body)), ModTime: mtime}, body}
}

func dir(name string) ent {
	return ent{h: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755, ModTime: mtime}}
}

func sym(name, target string) ent {
	return ent{h: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: mtime}}
}

func hard(name, target string) ent {
	return ent{h: tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, Mode: 0o644, ModTime: mtime}}
}

func node(name string, typ byte) ent {
	return ent{h: tar.Header{Typeflag: typ, Name: name, Mode: 0o644, Devmajor: 1, Devminor: 3, ModTime: mtime}}
}

func (e ent) mode(m int64) ent { e.h.Mode = m; return e }

func (e ent) owner(uid, gid int) ent { e.h.Uid, e.h.Gid = uid, gid; return e }

// layer is a tar stream of es. In names and link targets, @OUT@ stands for
// the directory holding the target and @TOP@ for the one above it.
func layer(t testing.TB, out string, es ...ent) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range es {
		h := e.h
		if out != "" {
			r := strings.NewReplacer("@OUT@", out, "@TOP@", filepath.Dir(out))
			h.Name, h.Linkname = r.Replace(h.Name), r.Replace(h.Linkname)
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatalf("writing %q: %v", h.Name, err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

const secret = "the host's secret\n"

// target makes <top>/secret and an empty <top>/out/root, and returns root
// opened, the path of out, and a check that nothing outside root changed.
func target(t *testing.T) (*os.Root, string, func()) {
	t.Helper()
	top := t.TempDir()
	out := filepath.Join(top, "out")
	dst := filepath.Join(out, "root")
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(top, "secret"), []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(dst)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	check := func() {
		t.Helper()
		if names := dirNames(t, out); !slices.Equal(names, []string{"root"}) {
			t.Errorf("written outside the target: %s holds %q", out, names)
		}
		if names := dirNames(t, top); !slices.Equal(names, []string{"out", "secret"}) {
			t.Errorf("written outside the target: %s holds %q", top, names)
		}
		p := filepath.Join(top, "secret")
		b, err := os.ReadFile(p)
		if err != nil || string(b) != secret {
			t.Errorf("secret changed: %q, %v", b, err)
		}
		if fi, err := os.Lstat(p); err != nil || fi.Sys().(*syscall.Stat_t).Nlink != 1 {
			t.Errorf("secret was linked: %v", err)
		}
	}
	return root, out, check
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// tree describes every entry under dir: "dir", "file:<content>" or
// "link:<target>".
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case d.IsDir():
			got[rel] = "dir"
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			got[rel] = "link:" + target
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			got[rel] = "file:" + string(b)
		default:
			got[rel] = "other:" + d.Type().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return got
}

type hostileCase struct {
	name    string
	entries []ent
	wantErr error
	want    map[string]string
}

// hostileCases are single layers, each refused or unpacked as want says.
// LayerCheck must agree with UnpackLayer on every one.
var hostileCases = []hostileCase{
	// Short enough a name, but each ancestor costs work: the depth is bounded.
	{name: "too deep", entries: []ent{reg(strings.Repeat("a/", maxDepth)+"f", "x")}, wantErr: ErrUnsafeLayer},
	{name: "dotdot", entries: []ent{reg("../evil", "x")}, wantErr: ErrUnsafeLayer},
	{name: "dotdot deep", entries: []ent{dir("a/"), reg("a/../../evil", "x")}, wantErr: ErrUnsafeLayer},
	{name: "dotdot dir", entries: []ent{dir("../evil/")}, wantErr: ErrUnsafeLayer},
	{name: "absolute", entries: []ent{reg("/evil", "x")}, wantErr: ErrUnsafeLayer},
	{name: "absolute to out", entries: []ent{reg("@OUT@/evil", "x")}, wantErr: ErrUnsafeLayer},
	{name: "write through in-root symlink", entries: []ent{dir("d/"), sym("l", "d"), reg("l/evil", "x")}, wantErr: ErrUnsafeLayer},
	{name: "write through symlink to outside", entries: []ent{sym("a", "@OUT@"), reg("a/evil", "x")}, wantErr: ErrUnsafeLayer},
	{name: "mkdir through symlink to outside", entries: []ent{sym("a", "@OUT@"), dir("a/evil/")}, wantErr: ErrUnsafeLayer},
	{name: "write through symlink to /etc", entries: []ent{sym("etc", "/etc"), reg("etc/passwd", "x")}, wantErr: ErrUnsafeLayer},
	{name: "symlink climbing", entries: []ent{sym("a", "../../..")}, wantErr: ErrUnsafeLayer},
	{name: "symlink climbing from below", entries: []ent{sym("x/y/a", "../../../b")}, wantErr: ErrUnsafeLayer},
	{name: "dir replaced by symlink then written through", entries: []ent{dir("d/"), reg("d/f", "x"), sym("d", "@OUT@"), reg("d/evil", "x")}, wantErr: ErrUnsafeLayer},
	{name: "hardlink to outside", entries: []ent{hard("h", "@TOP@/secret")}, wantErr: ErrUnsafeLayer},
	{name: "hardlink to /etc/shadow", entries: []ent{hard("h", "/etc/shadow")}, wantErr: ErrUnsafeLayer},
	{name: "hardlink climbing", entries: []ent{hard("h", "../../secret")}, wantErr: ErrUnsafeLayer},
	{name: "hardlink climbing after a dir", entries: []ent{dir("a/"), hard("h", "a/../../../secret")}, wantErr: ErrUnsafeLayer},
	{name: "hardlink through symlink", entries: []ent{sym("s", "@TOP@"), hard("h", "s/secret")}, wantErr: ErrUnsafeLayer},
	{name: "whiteout through symlink", entries: []ent{sym("s", "@TOP@"), reg("s/.wh.secret", "")}, wantErr: ErrUnsafeLayer},
	{name: "opaque through symlink", entries: []ent{sym("s", "@TOP@"), reg("s/.wh..wh..opq", "")}, wantErr: ErrUnsafeLayer},
	{name: "whiteout climbing", entries: []ent{reg("../.wh.out", "")}, wantErr: ErrUnsafeLayer},
	{name: "whiteout of dotdot", entries: []ent{dir("a/"), reg("a/.wh..", "")}, wantErr: ErrUnsafeLayer},
	{name: "file at the root", entries: []ent{reg(".", "x")}, wantErr: ErrUnsafeLayer},
	{name: "unsupported type", entries: []ent{node("c", tar.TypeCont)}, wantErr: ErrUnsafeLayer},
	{
		name:    "file replaces symlink to outside",
		entries: []ent{sym("f", "@TOP@/secret"), reg("f", "mine")},
		want:    map[string]string{"f": "file:mine"},
	},
	{
		name:    "file replaces hardlink",
		entries: []ent{reg("a", "one"), hard("b", "a"), reg("b", "two")},
		want:    map[string]string{"a": "file:one", "b": "file:two"},
	},
	{
		name:    "devices and fifos skipped",
		entries: []ent{node("dev/null", tar.TypeChar), node("sda", tar.TypeBlock), node("fifo", tar.TypeFifo), reg("f", "x")},
		want:    map[string]string{"f": "file:x"},
	},
	{
		name:    "absolute symlink kept as written",
		entries: []ent{sym("etc", "/etc"), sym("bin/py", "/usr/bin/python3")},
		want:    map[string]string{"etc": "link:/etc", "bin": "dir", "bin/py": "link:/usr/bin/python3"},
	},
	{
		name:    "relative symlink inside",
		entries: []ent{sym("x/y/a", "../../b"), sym("top", ".")},
		want:    map[string]string{"x": "dir", "x/y": "dir", "x/y/a": "link:../../b", "top": "link:."},
	},
}

func TestUnpackLayerHostile(t *testing.T) {
	for _, tc := range hostileCases {
		t.Run(tc.name, func(t *testing.T) {
			root, out, check := target(t)
			err := UnpackLayer(root, bytes.NewReader(layer(t, out, tc.entries...)))
			check()
			t.Log(err)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("UnpackLayer = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := tree(t, filepath.Join(out, "root")); !maps.Equal(got, tc.want) {
				t.Errorf("tree = %v, want %v", got, tc.want)
			}
		})
	}
}

type layersCase struct {
	name   string
	layers [][]ent
	want   map[string]string
}

// layersCases are images that unpack to want. LayerCheck must accept them.
var layersCases = []layersCase{
	{
		name:   "implicit parents",
		layers: [][]ent{{reg("a/b/c", "x")}},
		want:   map[string]string{"a": "dir", "a/b": "dir", "a/b/c": "file:x"},
	},
	{
		name:   "duplicates replaced",
		layers: [][]ent{{reg("f", "one"), reg("f", "two"), reg("x", "file"), dir("x/"), dir("y/"), reg("y/in", "z"), reg("y", "file"), sym("z", "f"), reg("z", "zz")}},
		want:   map[string]string{"f": "file:two", "x": "dir", "y": "file:file", "z": "file:zz"},
	},
	{
		name:   "replaced across layers",
		layers: [][]ent{{reg("f", "one"), dir("d/"), reg("d/in", "x"), sym("l", "f")}, {reg("f", "two"), reg("d", "now a file"), dir("l/")}},
		want:   map[string]string{"f": "file:two", "d": "file:now a file", "l": "dir"},
	},
	{
		name:   "directories merged",
		layers: [][]ent{{dir("d/"), reg("d/a", "a")}, {dir("d/").mode(0o700), reg("d/b", "b")}},
		want:   map[string]string{"d": "dir", "d/a": "file:a", "d/b": "file:b"},
	},
	{
		name:   "hardlink inside",
		layers: [][]ent{{reg("a", "x"), hard("b", "a"), hard("c", "./a")}},
		want:   map[string]string{"a": "file:x", "b": "file:x", "c": "file:x"},
	},
	{
		name: "whiteouts",
		layers: [][]ent{
			{reg("x", "x"), reg("y", "y"), dir("g/"), reg("g/h", "h"), reg("k", "k")},
			{reg(".wh.x", ""), reg(".wh.g", ""), reg(".wh.nothing", ""), reg(".wh.k", ""), reg("k", "new k"), reg("nodir/.wh.z", "")},
		},
		want: map[string]string{"y": "file:y", "k": "file:new k"},
	},
	{
		name: "whiteout spares the same layer",
		layers: [][]ent{
			{dir("d/"), reg("d/old", "old")},
			{reg("n", "n"), reg(".wh.n", ""), reg("d/new", "new"), reg(".wh.d", "")},
		},
		want: map[string]string{"n": "file:n", "d": "dir", "d/new": "file:new"},
	},
	{
		name: "opaque directory",
		layers: [][]ent{
			{dir("d/"), reg("d/a", "a"), reg("d/b", "b"), dir("d/sub/"), reg("d/sub/old", "old"), sym("d/l", "a"), reg("e/keep", "k")},
			{reg("d/c", "c"), dir("d/sub/"), reg("d/sub/new", "new"), reg("d/.wh..wh..opq", ""), reg("d/after", "after")},
		},
		want: map[string]string{
			"d": "dir", "d/c": "file:c", "d/sub": "dir", "d/sub/new": "file:new", "d/after": "file:after",
			"e": "dir", "e/keep": "file:k",
		},
	},
	{
		name: "opaque directory, docker order",
		layers: [][]ent{
			{dir("f/"), reg("f/old", "old"), dir("f/deep/"), reg("f/deep/x", "x")},
			{dir("f/"), reg("f/.wh..wh..opq", ""), reg("f/new", "new")},
		},
		want: map[string]string{"f": "dir", "f/new": "file:new"},
	},
	{
		name: "opaque new directory",
		layers: [][]ent{
			{reg("top", "t")},
			{reg("n/.wh..wh..opq", ""), reg(".wh..wh..opq", ""), reg("z", "z")},
		},
		want: map[string]string{"n": "dir", "z": "file:z"},
	},
	{
		name:   "aufs bookkeeping skipped",
		layers: [][]ent{{reg(".wh..wh.plnk/1.2", "x"), reg(".wh..wh.aufs", ""), reg("f", "f")}},
		want:   map[string]string{"f": "file:f"},
	},
}

func TestUnpackLayers(t *testing.T) {
	for _, tc := range layersCases {
		t.Run(tc.name, func(t *testing.T) {
			root, out, check := target(t)
			for i, l := range tc.layers {
				if err := UnpackLayer(root, bytes.NewReader(layer(t, out, l...))); err != nil {
					t.Fatalf("layer %d: %v", i+1, err)
				}
			}
			check()
			if got := tree(t, filepath.Join(out, "root")); !maps.Equal(got, tc.want) {
				t.Errorf("tree = %v\nwant   %v", got, tc.want)
			}
		})
	}
}

func TestUnpackLayerMetadata(t *testing.T) {
	root, out, check := target(t)
	ents := []ent{
		dir("./").mode(0o755),
		reg("suid", "x").mode(0o4755),
		reg("sgid", "x").mode(0o2711),
		reg("plain", "x").mode(0o640).owner(1234, 5678),
		dir("sgiddir/").mode(0o2775),
		dir("tmp/").mode(0o1777),
		dir("ro/").mode(0o555),
		reg("ro/f", "x").mode(0o444),
		sym("link", "plain").owner(1234, 5678),
	}
	if err := UnpackLayer(root, bytes.NewReader(layer(t, out, ents...))); err != nil {
		t.Fatal(err)
	}
	check()
	privileged := os.Geteuid() == 0
	dirBits := func(m fs.FileMode) fs.FileMode {
		if !privileged {
			m |= 0o700
		}
		return m
	}
	for _, tc := range []struct {
		name string
		mode fs.FileMode
	}{
		{"suid", 0o755},
		{"sgid", 0o711},
		{"plain", 0o640},
		{"sgiddir", fs.ModeDir | dirBits(0o775)},
		{"tmp", fs.ModeDir | fs.ModeSticky | 0o777},
		{"ro", fs.ModeDir | dirBits(0o555)},
		{"ro/f", 0o444},
	} {
		fi, err := root.Lstat(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != tc.mode {
			t.Errorf("%s: mode %v, want %v", tc.name, fi.Mode(), tc.mode)
		}
		if !fi.ModTime().Equal(mtime) {
			t.Errorf("%s: mtime %v, want %v", tc.name, fi.ModTime(), mtime)
		}
	}
	fi, err := root.Lstat("link")
	if err != nil {
		t.Fatal(err)
	}
	if !fi.ModTime().Equal(mtime) {
		t.Errorf("link: mtime %v, want %v", fi.ModTime(), mtime)
	}
	for _, name := range []string{"plain", "link"} {
		fi, err := root.Lstat(name)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if privileged && (st.Uid != 1234 || st.Gid != 5678) {
			t.Errorf("%s: owner %d:%d, want 1234:5678", name, st.Uid, st.Gid)
		}
		if !privileged && int(st.Uid) != os.Geteuid() {
			t.Errorf("%s: owner %d, want %d", name, st.Uid, os.Geteuid())
		}
	}
}

// sparseLayer is a PAX GNU sparse 1.0 file of 1 TiB whose stream is one
// block: Go's tar writer cannot make one, so the PAX header is hand-made.
func sparseLayer(t testing.TB) []byte {
	var records string
	for _, kv := range []string{"GNU.sparse.major=1", "GNU.sparse.minor=0", "GNU.sparse.name=big", "GNU.sparse.realsize=1099511627776"} {
		n := len(kv) + 4 // "NN " and "\n"
		records += fmt.Sprintf("%d %s\n", n, kv)
	}
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, e := range []ent{reg("PaxHeaders/big", records), reg("big", "1\n0\n0\n"+strings.Repeat("\x00", 506))} {
		if err := tw.WriteHeader(&e.h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
		tw.Flush()
	}
	tw.Close()
	out := b.Bytes()
	// Turn the first entry into a PAX header and fix its checksum.
	out[156] = tar.TypeXHeader
	copy(out[148:156], "        ")
	sum := 0
	for _, c := range out[:512] {
		sum += int(c)
	}
	copy(out[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return out
}

func TestUnpackLayerSparseRefused(t *testing.T) {
	b := sparseLayer(t)
	tr := tar.NewReader(bytes.NewReader(b))
	if h, err := tr.Next(); err != nil || h.Size != 1<<40 {
		t.Fatalf("test layer: %+v, %v", h, err)
	}
	root, _, check := target(t)
	err := UnpackLayer(root, bytes.NewReader(b))
	check()
	if !errors.Is(err, ErrUnsafeLayer) {
		t.Fatalf("UnpackLayer = %v, want %v", err, ErrUnsafeLayer)
	}
}

func FuzzUnpackLayer(f *testing.F) {
	for _, es := range [][]ent{
		{dir("./"), reg("a", "x"), dir("d/"), sym("d/l", "../a"), hard("h", "a"), reg("d/.wh..wh..opq", ""), reg(".wh.a", "")},
		{reg("../x", "x")},
		{reg("/x", "x")},
		{sym("l", ".."), reg("l/x", "x")},
		{sym("l", "/"), reg("l/x", "x")},
		{dir("d/"), sym("d", "."), reg("d/x", "x")},
		{hard("h", "../x")},
		{node("n", tar.TypeFifo), node("c", tar.TypeChar)},
		{reg("s", "x").mode(0o6755), dir("t/").mode(0o1000)},
	} {
		f.Add(layer(f, "", es...))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		out := t.TempDir()
		dst := filepath.Join(out, "root")
		if err := os.Mkdir(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(dst)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		// Twice, so that entries meet the ones a lower layer left.
		for range 2 {
			if UnpackLayer(root, bytes.NewReader(b)) != nil {
				break
			}
		}
		if names := dirNames(t, out); !slices.Equal(names, []string{"root"}) {
			t.Fatalf("written outside the target: %q", names)
		}
	})
}

// TestUnpackLayerEntryCap: a layer of more than MaxEntries entries is
// refused at the first past the cap, even entries UnpackLayer skips.
func TestUnpackLayerEntryCap(t *testing.T) {
	root, _, _ := target(t)
	// One FIFO header, repeated: writing each with tar.Writer takes seconds.
	fifo := layer(t, "", node("p", tar.TypeFifo))[:512]
	err := UnpackLayer(root, io.MultiReader(&repeated{b: fifo, n: MaxEntries + 1}, bytes.NewReader(make([]byte, 1024))))
	if !errors.Is(err, ErrLayerCap) || !strings.Contains(err.Error(), fmt.Sprint(MaxEntries)) {
		t.Fatalf("got %v, want the layer refused past %d entries", err, MaxEntries)
	}
}

// repeated reads as b, n times over.
type repeated struct {
	b   []byte
	n   int
	off int
}

func (r *repeated) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	k := copy(p, r.b[r.off:])
	if r.off += k; r.off == len(r.b) {
		r.off, r.n = 0, r.n-1
	}
	return k, nil
}
