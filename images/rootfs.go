package images

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// RootfsConfig is the part of an image config that FromRootfs sets.
type RootfsConfig struct {
	Env        []string
	WorkingDir string
	// User is the default "uid:gid"; airlock's policy overrides it anyway.
	User string
	// Created is recorded in the config; a fixed value keeps builds of the
	// same rootfs at the same ID.
	Created time.Time
}

// FromRootfs makes a single-layer image from a root filesystem tar. The
// layer is stored uncompressed, so its digest is its diff_id and the file is
// hashed once.
func FromRootfs(path string, rc RootfsConfig) (*Source, error) {
	l, err := newFileLayer(path)
	if err != nil {
		return nil, err
	}
	img, err := mutate.Append(empty.Image, mutate.Addendum{Layer: l, MediaType: types.OCIUncompressedLayer})
	if err != nil {
		return nil, fmt.Errorf("building image from %q: %w", path, err)
	}
	img = mutate.MediaType(img, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: rc.Created.UTC()}
	cf.Config.Env = rc.Env
	cf.Config.WorkingDir = rc.WorkingDir
	cf.Config.User = rc.User
	cf.History = []v1.History{{Created: cf.Created, CreatedBy: "airlock image import --rootfs", Comment: "root filesystem"}}
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("building image config: %w", err)
	}
	return &Source{Image: img, Format: "rootfs"}, nil
}

// fileLayer is an uncompressed tar on disk.
type fileLayer struct {
	path string
	hash v1.Hash
	size int64
}

func newFileLayer(path string) (*fileLayer, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("opening rootfs %q: %w", path, err)
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return nil, fmt.Errorf("hashing rootfs %q: %w", path, err)
	}
	return &fileLayer{path: path, hash: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(h.Sum(nil))}, size: n}, nil
}

func (l *fileLayer) Digest() (v1.Hash, error)            { return l.hash, nil }
func (l *fileLayer) DiffID() (v1.Hash, error)            { return l.hash, nil }
func (l *fileLayer) Size() (int64, error)                { return l.size, nil }
func (l *fileLayer) MediaType() (types.MediaType, error) { return types.OCIUncompressedLayer, nil }
func (l *fileLayer) Compressed() (io.ReadCloser, error)  { return l.Uncompressed() }
func (l *fileLayer) Uncompressed() (io.ReadCloser, error) {
	f, err := os.Open(l.path)
	if err != nil {
		return nil, err
	}
	return f, nil
}
