//go:build e2e

package e2e

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/airlock-sandbox/airlock/internal/imagetest"
)

// tarLayer is a layer of empty regular files.
func tarLayer(t *testing.T, names ...string) v1.Layer {
	t.Helper()
	var hs []tar.Header
	for _, n := range names {
		hs = append(hs, tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644})
	}
	l, err := imagetest.HeaderLayer(hs...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// busyboxPlus writes a layout of the busybox test image with layers added
// on top, and returns it and the image's ID.
func busyboxPlus(t *testing.T, layers ...v1.Layer) (string, string) {
	t.Helper()
	base := filepath.Join(t.TempDir(), "base")
	if err := os.MkdirAll(base, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := imagetest.BusyboxLayout(base); err != nil {
		t.Fatal(err)
	}
	p, err := layout.FromPath(base)
	if err != nil {
		t.Fatal(err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		t.Fatal(err)
	}
	m, err := idx.IndexManifest()
	if err != nil {
		t.Fatal(err)
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range layers {
		if img, err = mutate.Append(img, mutate.Addendum{Layer: l, MediaType: types.OCILayer}); err != nil {
			t.Fatal(err)
		}
	}
	id, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "layout")
	out, err := layout.Write(dir, empty.Index)
	if err != nil {
		t.Fatal(err)
	}
	if err := out.AppendImage(img); err != nil {
		t.Fatal(err)
	}
	return dir, id.String()
}

// notImported checks that image id is in neither index, nor in dockerd,
// and that no engine runs it.
func notImported(t *testing.T, id string) {
	t.Helper()
	ls := airlock(nil, "image", "ls", "--json")
	if ls.code != 0 || strings.Contains(ls.stdout, id) {
		t.Errorf("image ls: exit %d, lists %s: %s", ls.code, id, ls.stdout)
	}
	if b, err := os.ReadFile(filepath.Join(rootDir, "store", "oci", "index.json")); err != nil || bytes.Contains(b, []byte(id)) {
		t.Errorf("the store's index lists %s (%v)", id, err)
	}
	if _, err := dockerCli.ImageInspect(context.Background(), id); err == nil {
		t.Errorf("dockerd holds %s", id)
	}
	for _, eng := range []string{"oci", "docker"} {
		c := airlock(nil, "run", "--engine", eng, "--image", "airlock-e2e/refused@"+id, "--", "true")
		if c.code != 66 {
			t.Errorf("run --engine %s: exit %d, want 66 (not found): %s", eng, c.code, c.stderr)
		}
	}
	noSandboxLeft(t)
}

// A layer that names ../escape is refused at import, as invalid input, and
// the image is nowhere to be run.
func TestImportRefusesEscapingLayer(t *testing.T) {
	dir, id := busyboxPlus(t, tarLayer(t, "etc/fine"), tarLayer(t, "../escape"))
	c := airlock(nil, "image", "import", "--name", "airlock-e2e/escape", dir)
	if c.code != 64 || !strings.Contains(c.stderr, `entry "../escape"`) || !strings.Contains(c.stderr, "layer 3") {
		t.Fatalf("import: exit %d stderr %s; want 64 naming layer 3 and the entry", c.code, c.stderr)
	}
	notImported(t, id)
}

// dockerd refuses an image of more than 125 layers (its maximum depth),
// which airlock's own checks and the oci engine accept. The import fails
// after the store has its blobs, and leaves the image in no index.
func TestImportRolledBackWhenDockerdRefuses(t *testing.T) {
	// An import, whatever the pair: every import loads into dockerd.
	onlyPair(t, "docker", "gvisor")
	var layers []v1.Layer
	for i := range 130 {
		layers = append(layers, tarLayer(t, fmt.Sprintf("etc/layer%03d", i)))
	}
	dir, id := busyboxPlus(t, layers...)
	c := airlock(nil, "image", "import", "--name", "airlock-e2e/deep", dir)
	if c.code != 70 || !strings.Contains(c.stderr, "dockerd") || !strings.Contains(c.stderr, "nothing was imported") {
		t.Fatalf("import: exit %d stderr %s; want 70 from dockerd's load", c.code, c.stderr)
	}
	t.Logf("refused: %s", strings.TrimSpace(c.stderr[strings.LastIndex(strings.TrimSpace(c.stderr), "\n")+1:]))
	notImported(t, id)
}
