package images

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"path"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/airlock-sandbox/airlock/store"
)

// Export writes the images refs, read from st, to w as a tar of one OCI
// image layout: oci-layout, index.json, then every blob once. The
// manifests and configs are copied byte for byte, so an import of the tar
// on another host yields the same image IDs and manifest digests. Every
// blob is checked against its digest and size as it is written; a store
// blob that does not match fails the export, wrapping ErrDigest, and w
// then holds a partial tar the caller must discard. A ref's Name, or else
// the name the store holds, goes into index.json as the image's
// org.opencontainers.image.ref.name. The tar is the same for the same
// images: entries are in a fixed order with fixed times and modes.
func Export(ctx context.Context, st *store.Store, refs []Ref, w io.Writer, progress Progress) error {
	if progress == nil {
		progress = func(string, ...any) {}
	}
	entries, err := st.List()
	if err != nil {
		return err
	}
	type blob struct {
		desc v1.Descriptor
		img  v1.Image
		raw  []byte // manifests and configs; nil for a layer
	}
	var (
		blobs []blob
		seen  = map[v1.Hash]bool{}
		index = ocispec.Index{Versioned: specs.Versioned{SchemaVersion: 2}, MediaType: ocispec.MediaTypeImageIndex, Manifests: []ocispec.Descriptor{}}
	)
	add := func(b blob) {
		if !seen[b.desc.Digest] {
			seen[b.desc.Digest] = true
			blobs = append(blobs, b)
		}
	}
	listed := map[string]bool{}
	for _, ref := range refs {
		if listed[ref.ID.String()] {
			continue // named twice: one entry, so the layout holds each image once
		}
		listed[ref.ID.String()] = true
		var e store.Entry
		for _, x := range entries {
			if x.ID == ref.ID {
				e = x
			}
		}
		if e.ID == "" {
			return fmt.Errorf("exporting %s: image %q is not in airlock's store (`airlock image ls` lists what is)", ref, ref.ID)
		}
		img, err := st.Image(ref.ID) // checks the manifest and config digests
		if err != nil {
			return fmt.Errorf("exporting %s: %w", ref, err)
		}
		rawManifest, err := img.RawManifest()
		if err != nil {
			return fmt.Errorf("exporting %s: reading manifest: %w", ref, err)
		}
		rawConfig, err := img.RawConfigFile()
		if err != nil {
			return fmt.Errorf("exporting %s: reading config: %w", ref, err)
		}
		m, err := img.Manifest()
		if err != nil {
			return fmt.Errorf("exporting %s: parsing manifest: %w", ref, err)
		}
		mt, err := img.MediaType()
		if err != nil {
			return fmt.Errorf("exporting %s: reading manifest: %w", ref, err)
		}
		for _, l := range m.Layers {
			add(blob{desc: l, img: img})
		}
		add(blob{desc: m.Config, raw: rawConfig})
		mdesc := v1.Descriptor{MediaType: mt, Size: int64(len(rawManifest)), Digest: v1.Hash{Algorithm: "sha256", Hex: e.Manifest.Encoded()}}
		add(blob{desc: mdesc, raw: rawManifest})

		name := ref.Name
		if name == "" {
			name = e.Name
		}
		d := ocispec.Descriptor{
			MediaType:   string(mt),
			Digest:      e.Manifest,
			Size:        int64(len(rawManifest)),
			Annotations: map[string]string{store.AnnotationImageID: ref.ID.String()},
		}
		if name != "" {
			d.Annotations[ocispec.AnnotationRefName] = name
		}
		if cfg, err := img.ConfigFile(); err == nil && cfg.OS != "" {
			d.Platform = &ocispec.Platform{OS: cfg.OS, Architecture: cfg.Architecture, Variant: cfg.Variant}
		}
		index.Manifests = append(index.Manifests, d)
	}

	tw := tar.NewWriter(w)
	layoutFile, err := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	if err != nil {
		return err
	}
	indexFile, err := json.MarshalIndent(index, "", "  ")
	if err != nil {
		return err
	}
	for _, dir := range []string{"blobs/", "blobs/sha256/"} {
		if err := tw.WriteHeader(header(dir, tar.TypeDir, 0o755, 0)); err != nil {
			return fmt.Errorf("writing the layout: %w", err)
		}
	}
	for _, f := range []struct {
		name string
		data []byte
	}{{ocispec.ImageLayoutFile, layoutFile}, {ocispec.ImageIndexFile, indexFile}} {
		if err := writeEntry(tw, f.name, bytes.NewReader(f.data), int64(len(f.data))); err != nil {
			return err
		}
	}
	for i, b := range blobs {
		if err := ctx.Err(); err != nil {
			return err
		}
		name := path.Join("blobs", b.desc.Digest.Algorithm, b.desc.Digest.Hex)
		rc := io.NopCloser(bytes.NewReader(b.raw))
		if b.raw == nil {
			progress("exporting blob %d/%d (%s, %d bytes)", i+1, len(blobs), b.desc.Digest.Hex[:12], b.desc.Size)
			l, err := b.img.LayerByDigest(b.desc.Digest)
			if err == nil {
				rc, err = l.Compressed()
			}
			if err != nil {
				return fmt.Errorf("reading layer %s: %w", b.desc.Digest, err)
			}
		}
		// The verifier fails on the first byte past the size, and at EOF on
		// a wrong count or digest, before the tar entry is complete.
		err := writeEntry(tw, name, NewVerifier(rc, b.desc.Digest, b.desc.Size), b.desc.Size)
		rc.Close()
		if err != nil {
			return fmt.Errorf("exporting blob %s: %w", b.desc.Digest, err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("writing the layout: %w", err)
	}
	return nil
}

// header is a tar header with the fixed owner, time and mode of an export.
func header(name string, typ byte, mode, size int64) *tar.Header {
	return &tar.Header{Typeflag: typ, Name: name, Mode: mode, Size: size, ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
}

// writeEntry writes one regular file of exactly size bytes from r, reading
// r to its end so that a Verifier sees EOF and checks the digest.
func writeEntry(tw *tar.Writer, name string, r io.Reader, size int64) error {
	if err := tw.WriteHeader(header(name, tar.TypeReg, 0o644, size)); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	if _, err := io.Copy(tw, r); err != nil {
		return fmt.Errorf("writing %s: %w", name, err)
	}
	return nil
}
