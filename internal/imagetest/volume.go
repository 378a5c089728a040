package imagetest

import (
	"fmt"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// BusyboxLayoutConfig is BusyboxLayoutFiles with the image config edited by
// edit (a VOLUME, a HEALTHCHECK, labels…), for tests of what an engine
// makes of an image's config.
func BusyboxLayoutConfig(dir string, edit func(*v1.Config), extra ...File) error {
	base := dir + ".base"
	if err := BusyboxLayoutFiles(base, extra...); err != nil {
		return err
	}
	defer os.RemoveAll(base)
	idx, err := layout.ImageIndexFromPath(base)
	if err != nil {
		return err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	if len(m.Manifests) != 1 {
		return fmt.Errorf("busybox layout holds %d images, want 1", len(m.Manifests))
	}
	img, err := idx.Image(m.Manifests[0].Digest)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	edit(&cf.Config)
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img)
}
