package images

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/opencontainers/go-digest"
)

// The fuzzed documents name the other blobs by placeholders, replaced by
// their real digests and sizes before the layout is written, so that the
// mutations explore the documents rather than break every link.
const (
	seedLayer    = "@L@"
	seedLayerLen = "@LS@"
	seedConfig   = "@C@"
	seedConfLen  = "@CS@"
	seedManifest = "@M@"
	seedManLen   = "@MS@"
)

// FuzzOpenLayout writes an OCI layout (index.json, a manifest, a config
// and a layer, each fuzzed) as a directory and as a tar, opens both and
// verifies what opens. The two forms agree; nothing is left in the
// temporary directory; and an image that verifies has the ID, manifest
// and layer count of blobs the layout holds.
func FuzzOpenLayout(f *testing.F) {
	var lb bytes.Buffer
	tw := tar.NewWriter(&lb)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "hello.txt", Size: 2, Mode: 0o644})
	tw.Write([]byte("hi"))
	tw.Close()
	layer := lb.Bytes()
	var ub bytes.Buffer
	tw = tar.NewWriter(&ub)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "../escape", Size: 0})
	tw.Close()

	config := []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":["@L@"]},"config":{"Env":["A=1"]}}`)
	manifest := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"@C@","size":@CS@},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"@L@","size":@LS@}]}`)
	entry := `{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"@M@","size":@MS@,"annotations":{"org.opencontainers.image.ref.name":"x:1"},"platform":{"architecture":"amd64","os":"linux"}}`
	index := func(entries ...string) []byte {
		b := []byte(`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[`)
		for i, e := range entries {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, e...)
		}
		return append(b, "]}"...)
	}
	f.Add(index(entry), manifest, config, layer)
	f.Add(index(entry, entry), manifest, config, layer)
	f.Add(index(), manifest, config, layer)
	f.Add(index(entry), manifest, config, ub.Bytes())
	f.Add(index(string(bytes.ReplaceAll([]byte(entry), []byte("amd64"), []byte("arm64")))), manifest, config, layer)
	f.Add(index(string(bytes.ReplaceAll([]byte(entry), []byte(seedManLen), []byte("1")))), manifest, config, layer)
	f.Add(index(entry), bytes.ReplaceAll(manifest, []byte(".tar\""), []byte(".tar+gzip\"")), config, layer)
	f.Add(index(entry), bytes.ReplaceAll(manifest, []byte(seedConfig), []byte(seedLayer)), config, layer)
	f.Add(index(string(bytes.ReplaceAll([]byte(entry), []byte("manifest.v1"), []byte("index.v1")))), manifest, config, layer)
	f.Add([]byte(`{}`), []byte(`{}`), []byte(`{}`), []byte{})

	work := f.TempDir()
	tmp := filepath.Join(work, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		f.Fatal(err)
	}
	f.Setenv("TMPDIR", tmp) // where Open unpacks a layout tar
	dir, tarPath := filepath.Join(work, "layout"), filepath.Join(work, "layout.tar")

	f.Fuzz(func(t *testing.T, index, manifest, config, layer []byte) {
		blobs := writeLayout(t, dir, tarPath, index, manifest, config, layer)
		fromDir, dirErr := openAndVerify(t, dir)
		fromTar, tarErr := openAndVerify(t, tarPath)
		if (dirErr == nil) != (tarErr == nil) || fromDir != fromTar {
			t.Fatalf("the directory gives %+v, %v; the tar %+v, %v", fromDir, dirErr, fromTar, tarErr)
		}
		if left, _ := os.ReadDir(tmp); len(left) > 0 {
			t.Fatalf("left in the temporary directory: %v", left)
		}
		if dirErr != nil {
			return
		}
		if !slices.Contains(blobs, fromDir.ID) || !slices.Contains(blobs, fromDir.Manifest) || fromDir.Layers < 0 {
			t.Fatalf("verified %+v, not of the layout's blobs %v", fromDir, blobs)
		}
	})
}

// writeLayout writes the layout as dir and as a tar at tarPath, and
// returns the blobs' digests.
func writeLayout(t *testing.T, dir, tarPath string, index, manifest, config, layer []byte) []digest.Digest {
	t.Helper()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	fill := func(b []byte, kv ...[]byte) []byte {
		for i := 0; i+1 < len(kv); i += 2 {
			b = bytes.ReplaceAll(b, kv[i], kv[i+1])
		}
		return b
	}
	sum := func(b []byte) (digest.Digest, []byte) {
		s := sha256.Sum256(b)
		return digest.Digest("sha256:" + hex.EncodeToString(s[:])), []byte(strconv.Itoa(len(b)))
	}
	ld, ll := sum(layer)
	config = fill(config, []byte(seedLayerLen), ll, []byte(seedLayer), []byte(ld))
	cd, cl := sum(config)
	manifest = fill(manifest, []byte(seedLayerLen), ll, []byte(seedLayer), []byte(ld), []byte(seedConfLen), cl, []byte(seedConfig), []byte(cd))
	md, ml := sum(manifest)
	index = fill(index, []byte(seedManLen), ml, []byte(seedManifest), []byte(md))
	files := map[string][]byte{
		"oci-layout":                   []byte(`{"imageLayoutVersion":"1.0.0"}`),
		"index.json":                   index,
		"blobs/sha256/" + ld.Encoded(): layer,
		"blobs/sha256/" + cd.Encoded(): config,
		"blobs/sha256/" + md.Encoded(): manifest,
	}
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for n := range files {
			if !yield(n) {
				return
			}
		}
	}) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, files[name], 0o644); err != nil {
			t.Fatal(err)
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(files[name])), Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		tw.Write(files[name])
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tarPath, tb.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return []digest.Digest{ld, cd, md}
}

// openAndVerify opens the layout at p and verifies the image, as an
// import does.
func openAndVerify(t *testing.T, p string) (Verified, error) {
	t.Helper()
	src, err := Open(t.Context(), p)
	if err != nil {
		return Verified{}, err
	}
	defer src.Close()
	if src.Format != "oci-layout" || src.Manifest == nil {
		t.Fatalf("a layout opened as %q, manifest %v", src.Format, src.Manifest)
	}
	return Verify(t.Context(), src, Limits{}, nil)
}
