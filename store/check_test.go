package store

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

func checkLayers(t testing.TB, layers ...[]byte) error {
	c := NewLayerCheck()
	for _, l := range layers {
		if err := c.Layer(bytes.NewReader(l)); err != nil {
			return err
		}
	}
	return nil
}

// TestLayerCheckAgreesWithUnpack: what UnpackLayer refuses as unsafe,
// LayerCheck refuses from the headers alone; what it unpacks, LayerCheck
// accepts.
func TestLayerCheckAgreesWithUnpack(t *testing.T) {
	out := filepath.Join(t.TempDir(), "out")
	for _, tc := range hostileCases {
		t.Run(tc.name, func(t *testing.T) {
			err := checkLayers(t, layer(t, out, tc.entries...))
			if tc.wantErr != nil && !errors.Is(err, tc.wantErr) {
				t.Fatalf("LayerCheck = %v, want %v", err, tc.wantErr)
			}
			if tc.wantErr == nil && err != nil {
				t.Fatalf("LayerCheck refused a layer UnpackLayer takes: %v", err)
			}
		})
	}
	for _, tc := range layersCases {
		t.Run(tc.name, func(t *testing.T) {
			var ls [][]byte
			for _, l := range tc.layers {
				ls = append(ls, layer(t, out, l...))
			}
			if err := checkLayers(t, ls...); err != nil {
				t.Fatalf("LayerCheck refused an image UnpackLayer takes: %v", err)
			}
		})
	}
}

// TestLayerCheckAcrossLayers: what a lower layer left decides an entry.
func TestLayerCheckAcrossLayers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		layers [][]ent
		refuse string // "" to accept; else a part of the error
	}{
		{name: "deep within the bound", layers: [][]ent{{reg(strings.Repeat("a/", maxDepth-1)+"f", "x")}}},
		{name: "write through a lower symlink", layers: [][]ent{{sym("etc", "/etc")}, {reg("etc/passwd", "x")}}, refuse: `"etc/passwd" is under the symlink "etc"`},
		{name: "deep under a lower symlink", layers: [][]ent{{dir("a/"), sym("a/b", "/")}, {reg("a/b/c/d", "x")}}, refuse: "under the symlink"},
		{name: "hardlink through a lower symlink", layers: [][]ent{{sym("s", "/etc")}, {hard("h", "s/shadow")}}, refuse: "hardlink target"},
		{name: "whiteout through a lower symlink", layers: [][]ent{{sym("s", "/etc")}, {reg("s/.wh.passwd", "")}}, refuse: "under the symlink"},
		{name: "hardlink to nothing", layers: [][]ent{{hard("h", "missing")}}, refuse: "hardlink target"},
		{name: "hardlink to a directory", layers: [][]ent{{dir("d/"), hard("h", "d")}}, refuse: "hardlink target"},
		{name: "hardlink to a whited-out file", layers: [][]ent{{reg("f", "x")}, {reg(".wh.f", ""), hard("h", "f")}}, refuse: "hardlink target"},
		{name: "under a lower file", layers: [][]ent{{reg("f", "x")}, {reg("f/g", "y")}}, refuse: "not a directory"},
		{name: "long name", layers: [][]ent{{reg(strings.Repeat("a/", 2100)+"f", "x")}}, refuse: "over 4096 bytes"},
		{name: "not a tar", refuse: "reading layer"},

		{name: "hardlink to a lower file", layers: [][]ent{{reg("f", "x")}, {hard("h", "f")}}},
		{name: "symlink replaced by a directory", layers: [][]ent{{sym("etc", "/etc")}, {dir("etc/"), reg("etc/passwd", "x")}}},
		{name: "symlink whited out", layers: [][]ent{{sym("etc", "/etc")}, {reg(".wh.etc", ""), reg("etc/passwd", "x")}}},
		{name: "symlink under an opaque directory", layers: [][]ent{{sym("d/l", "/")}, {reg("d/.wh..wh..opq", ""), reg("d/l/x", "x")}}},
		{name: "symlink under a replaced directory", layers: [][]ent{{sym("d/l", "/")}, {reg("d", "file"), dir("d/"), reg("d/l/x", "x")}}},
		{name: "symlink of the same layer is spared by its whiteout", layers: [][]ent{{dir("d/")}, {sym("d/l", "/"), reg("d/.wh.l", "")}, {reg("x", "")}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ls [][]byte
			for _, l := range tc.layers {
				ls = append(ls, layer(t, "", l...))
			}
			if tc.layers == nil {
				ls = [][]byte{[]byte("not a tar archive, not at all, no")}
			}
			err := checkLayers(t, ls...)
			if tc.refuse == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrUnsafeLayer) || !strings.Contains(err.Error(), tc.refuse) {
				t.Fatalf("got %v, want ErrUnsafeLayer mentioning %q", err, tc.refuse)
			}
			t.Log(err)
		})
	}
}

// FuzzLayerCheck: LayerCheck accepts a two-layer image exactly when
// UnpackLayer unpacks it.
func FuzzLayerCheck(f *testing.F) {
	for _, es := range [][]ent{
		{dir("./"), reg("a", "x"), dir("d/"), sym("d/l", "../a"), hard("h", "a"), reg("d/.wh..wh..opq", ""), reg(".wh.a", "")},
		{reg("../x", "x")},
		{sym("l", "/"), reg("l/x", "x")},
		{sym("l", "/")},
		{reg("l/x", "x"), reg(".wh.l", "")},
		{hard("h", "a"), reg("a", "")},
		{reg("f", ""), reg("f/g", "")},
		{node("n", tar.TypeFifo), node("c", tar.TypeChar)},
	} {
		f.Add(layer(f, "", es...), layer(f, "", reg("a", "")))
	}
	f.Fuzz(func(t *testing.T, lower, upper []byte) {
		checked := checkLayers(t, lower, upper)
		dst := filepath.Join(t.TempDir(), "root")
		if err := os.Mkdir(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		root, err := os.OpenRoot(dst)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		unpacked := UnpackLayer(root, bytes.NewReader(lower))
		if unpacked == nil {
			unpacked = UnpackLayer(root, bytes.NewReader(upper))
		}
		if (checked == nil) != (unpacked == nil) {
			t.Fatalf("LayerCheck: %v; UnpackLayer: %v", checked, unpacked)
		}
	})
}

// deepLayer streams a layer of n empty files, each in a top directory of
// its own and depth directories below it: 512-byte headers that each name
// depth+1 new paths.
func deepLayer(n, depth int) io.Reader {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		deep := strings.Repeat("a/", depth)
		for i := range n {
			h := &tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("%07d/%sf", i, deep), Mode: 0o644, Format: tar.FormatPAX}
			if err := tw.WriteHeader(h); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(tw.Close())
	}()
	return pr
}

// TestLayerCheckPathCap: 40,000 empty files 120 directories deep, 200 KB
// gzipped, name 4.9 million paths. The check refuses the layer once the
// paths it keeps pass MaxPathBytes, and its heap stays within that cap.
func TestLayerCheckPathCap(t *testing.T) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c := NewLayerCheck()
	err := c.Layer(deepLayer(40000, 120))
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(c)
	if !errors.Is(err, ErrLayerCap) || !errors.Is(err, ErrUnsafeLayer) || !strings.Contains(err.Error(), MaxPathBytes.String()) {
		t.Fatalf("got %v, want the layer refused at the %s cap", err, MaxPathBytes)
	}
	grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("%v; refused at entry %d, heap grew %d MiB", err, c.seq, grew>>20)
	if grew > int64(MaxPathBytes) {
		t.Errorf("the heap grew %d MiB, over the %s cap", grew>>20, MaxPathBytes)
	}
}

// TestLayerCheckEntryCap: more entries than MaxEntries are refused, even
// when each is one the check skips.
func TestLayerCheckEntryCap(t *testing.T) {
	c := NewLayerCheck()
	c.seq = MaxEntries - 1
	err := c.Layer(bytes.NewReader(layer(t, "", node("p1", tar.TypeFifo), node("p2", tar.TypeFifo))))
	if !errors.Is(err, ErrLayerCap) || !strings.Contains(err.Error(), fmt.Sprint(MaxEntries)) {
		t.Fatalf("got %v, want the entry past %d refused", err, MaxEntries)
	}
}
