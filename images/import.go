package images

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/store"
	"github.com/airlock-sandbox/airlock/units"
)

// Loader is what an import needs of an engine that keeps images of its
// own: dockerd (*docker.Engine).
type Loader interface {
	Ping(ctx context.Context) error
	HasImage(ctx context.Context, id string) (bool, error)
	Load(ctx context.Context, img v1.Image, id digest.Digest, tag name.Tag) error
	RemoveImage(ctx context.Context, id digest.Digest) (bool, error)
}

// ImportOptions describe one import.
type ImportOptions struct {
	// Root is airlock's state directory: the store is Root/store and the
	// index Root/images.
	Root string
	// Name is the repository shown with the digest. Empty takes the
	// archive's own name, else one made from the file name.
	Name string
	// Rootfs, when set, makes the archive a root filesystem tar, imported
	// as a one-layer image with this configuration.
	Rootfs *RootfsConfig
	// RequireDigest, when set, refuses any image but this one.
	RequireDigest digest.Digest
	// SetDefault records the image as the default, with Recipe (the hash
	// of what built it) in the lock.
	SetDefault bool
	Recipe     string
	// Limits caps what the image's layers hold uncompressed; the zero
	// value takes the defaults.
	Limits Limits
	// Loader, when set and reachable, gets the image too; an unreachable
	// one leaves the image to the oci engine alone.
	Loader   Loader
	Progress Progress
}

// Import verifies the image at path, stores it and loads it into
// opt.Loader, all or nothing: the store's blobs first, then the loader,
// then the store's index and airlock's, each step undone if a later one
// fails. Errors are classed with errdefs: a damaged, unsafe or unwanted
// archive is invalid input, a missing one not found, a local failure to
// read or unpack it unavailable.
func Import(ctx context.Context, path string, opt ImportOptions) (ref Ref, err error) {
	step := opt.Progress
	if step == nil {
		step = func(string, ...any) {}
	}
	if opt.Limits.Layer < 0 || opt.Limits.Image < 0 {
		return ref, fmt.Errorf("%w: size caps %d and %d: a cap is a positive size, or zero for the default", errdefs.ErrInvalidArgument, opt.Limits.Layer, opt.Limits.Image)
	}
	var src *Source
	if opt.Rootfs != nil {
		step("hashing root filesystem %s", path)
		src, err = FromRootfs(path, *opt.Rootfs)
	} else {
		step("reading %s", path)
		src, err = openImage(ctx, path, opt.RequireDigest, opt.Limits)
	}
	if err != nil {
		if errors.Is(err, ErrNotRequired) {
			return ref, fmt.Errorf("%w: %s: %w; nothing was imported", errdefs.ErrInvalidArgument, path, err)
		}
		switch {
		case errors.Is(err, ErrFormat) || errors.Is(err, ErrTooLarge):
			return ref, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
		case errors.Is(err, fs.ErrNotExist):
			return ref, fmt.Errorf("%w: %w", errdefs.ErrNotFound, err)
		case ctx.Err() != nil:
			return ref, ctx.Err()
		}
		// A local failure: no space for the unpacked layout, an I/O error.
		return ref, fmt.Errorf("%w: %w", errdefs.ErrUnavailable, err)
	}
	defer src.Close()
	// The required image is known by its config alone: an archive that
	// holds another is refused before any layer is read.
	if opt.RequireDigest != "" {
		raw, err := src.Image.RawConfigFile()
		if err != nil {
			return ref, fmt.Errorf("%w: %s: reading its config: %v; nothing was imported", errdefs.ErrInvalidArgument, path, err)
		}
		if sum := sha256.Sum256(raw); "sha256:"+hex.EncodeToString(sum[:]) != opt.RequireDigest.String() {
			return ref, fmt.Errorf("%w: %s holds image sha256:%x, not the %s that --require-digest requires; nothing was imported (check that you carried the right archive)", errdefs.ErrInvalidArgument, path, sum, opt.RequireDigest)
		}
	}

	v, err := Verify(ctx, src, opt.Limits, step)
	switch {
	case errors.Is(err, store.ErrLayerCap) || errors.Is(err, errFixedCap):
		return ref, fmt.Errorf("%w: verifying %s: %w; nothing was imported (real images stay far below this cap)", errdefs.ErrInvalidArgument, path, err)
	case errors.Is(err, store.ErrUnsafeLayer):
		return ref, fmt.Errorf("%w: verifying %s: %w; airlock refuses such layers, so nothing was imported (rebuild the image without that entry)", errdefs.ErrInvalidArgument, path, err)
	case ctx.Err() != nil:
		return ref, ctx.Err()
	case errors.Is(err, ErrTooLarge):
		return ref, fmt.Errorf("%w: verifying %s: %w; nothing was imported (a small blob that expands this far is likely a compression bomb; if the image really is this large, raise the cap)", errdefs.ErrInvalidArgument, path, err)
	case err != nil:
		return ref, fmt.Errorf("%w: verifying %s: %w; the archive is damaged or was tampered with, so nothing was imported", errdefs.ErrInvalidArgument, path, err)
	}
	step("verified %d layer(s), %s (%s uncompressed), image %s", v.Layers, units.Bytes(v.Size).Approx(), units.Bytes(v.Uncompressed).Approx(), v.ID)
	if opt.RequireDigest != "" && v.ID != opt.RequireDigest {
		return ref, fmt.Errorf("%w: %s holds image %s, not the %s that --require-digest requires; nothing was imported (check that you carried the right archive)", errdefs.ErrInvalidArgument, path, v.ID, opt.RequireDigest)
	}

	tag, err := importTag(opt.Name, src.Name, path, v.ID)
	if err != nil {
		return ref, err
	}
	ref = Ref{Name: tag.Context().RepositoryStr(), ID: v.ID}
	if tag.Context().RegistryStr() != name.DefaultRegistry {
		ref.Name = tag.Context().Name()
	}

	// Undo what was done, newest first, if a later step fails. Cleanup
	// outlives a cancelled ctx.
	var undo []func(context.Context) error
	defer func() {
		if err == nil {
			return
		}
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		for _, u := range slices.Backward(undo) {
			if uerr := u(cctx); uerr != nil {
				err = fmt.Errorf("%w (and undoing the import: %v)", err, uerr)
			}
		}
	}()

	st, err := store.Open(filepath.Join(opt.Root, "store"))
	if err != nil {
		return ref, fmt.Errorf("%w: opening the image store: %v", errdefs.ErrUnavailable, err)
	}
	step("writing to airlock's store")
	staged, err := st.Stage(ctx, src.Image, ref.Name)
	if err != nil {
		return ref, fmt.Errorf("%w: storing the image: %v", errdefs.ErrInternal, err)
	}
	defer staged.Close()
	if opt.Loader != nil {
		unload, err := load(ctx, opt.Loader, src.Image, v.ID, tag, step)
		if err != nil {
			return ref, err
		}
		if unload != nil {
			undo = append(undo, unload)
		}
	}

	unlist, err := staged.Commit(ctx)
	if err != nil {
		return ref, fmt.Errorf("%w: listing the image in the store: %v", errdefs.ErrInternal, err)
	}
	undo = append(undo, unlist)
	idx := OpenIndex(filepath.Join(opt.Root, "images"))
	unrecord, err := idx.Put(Record{Name: ref.Name, ID: v.ID, Manifest: v.Manifest, Format: src.Format, Size: v.Size, ImportedAt: time.Now().UTC()})
	if err != nil {
		return ref, err
	}
	undo = append(undo, func(context.Context) error { return unrecord() })
	if opt.SetDefault {
		if err := idx.SetDefault(Lock{Ref: ref.String(), BuiltAt: time.Now().UTC(), Recipe: opt.Recipe}); err != nil {
			return ref, err
		}
		step("recorded as the default image")
	}
	return ref, nil
}

// load gives the image to l when it answers, and returns how to take it
// back: nil when l held it before, or did not answer.
func load(ctx context.Context, l Loader, img v1.Image, id digest.Digest, tag name.Tag, step Progress) (undo func(context.Context) error, err error) {
	if perr := l.Ping(ctx); perr != nil {
		step("dockerd is not reachable: imported for the oci engine only (%v)", perr)
		return nil, nil
	}
	had, err := l.HasImage(ctx, id.String())
	if err != nil {
		return nil, err
	}
	if !had {
		undo = func(ctx context.Context) error {
			_, err := l.RemoveImage(ctx, id)
			return err
		}
	}
	step("loading into dockerd")
	start := time.Now()
	if err := l.Load(ctx, img, id, tag); err != nil {
		if undo != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if uerr := undo(cctx); uerr != nil {
				return nil, fmt.Errorf("%w; nothing was imported (and undoing the load: %v)", err, uerr)
			}
		}
		return nil, fmt.Errorf("%w; nothing was imported", err)
	}
	step("loaded in %.1fs", time.Since(start).Seconds())
	return undo, nil
}

// importTag names an import: the name asked for, else the archive's,
// else one made from the file name; always tagged with the image ID's
// first 12 hex digits, since a tag from the archive is not kept.
func importTag(asked, archive, path string, id digest.Digest) (name.Tag, error) {
	repo := asked
	if repo == "" {
		repo = archive
	}
	if repo == "" {
		repo = "local/" + sanitize(strings.TrimSuffix(filepath.Base(strings.TrimRight(path, "/")), filepath.Ext(path)))
	}
	if i := strings.LastIndex(repo, ":"); i > strings.LastIndex(repo, "/") {
		repo = repo[:i]
	}
	tag, err := name.NewTag(repo + ":" + id.Encoded()[:12])
	if err != nil {
		return tag, fmt.Errorf("%w: name %q is not a valid repository name: %v", errdefs.ErrInvalidArgument, repo, err)
	}
	return tag, nil
}

// sanitize makes s a valid repository path component.
func sanitize(s string) string {
	s = strings.ToLower(s)
	var b strings.Builder
	for _, r := range s {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	out := strings.Trim(b.String(), "-_.")
	if out == "" {
		return "image"
	}
	return out
}
