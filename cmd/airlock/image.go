package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/store"
	"github.com/airlock-sandbox/airlock/units"
)

func newImageCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Import, list and pin the images airlock runs",
		Long: `airlock runs only images it can name by digest. Import an image once with
'airlock image import'; it is verified blob by blob, loaded into the engine,
and printed as a pinned reference to pass to 'airlock run --image'. airlock
never pulls from a registry.`,
	}
	cmd.AddCommand(newImageImportCmd(g), newImageExportCmd(g), newImageLsCmd(g), newImageRmCmd(g), newImageDefaultCmd(g))
	return cmd
}

type importFlags struct {
	name, workdir, user, recipe string
	requireDigest               string
	maxLayer, maxImage          string
	env                         []string
	rootfs, setDefault          bool
}

func newImageImportCmd(g *globals) *cobra.Command {
	f := &importFlags{}
	cmd := &cobra.Command{
		Use:   "import PATH",
		Short: "Verify an image archive, load it, and print its pinned reference",
		Long: `Import an image from PATH, which is one of:
  - an OCI image layout directory (it has an oci-layout file),
  - a tar of an OCI image layout (as 'docker save' writes since Docker 25),
  - a 'docker save' archive (manifest.json and layer tars),
  - with --rootfs, a tar of a root filesystem, made into a one-layer image.

Every blob is checked against its digest and size, and every layer against
the config's diff_ids, before anything reaches the engine. The pinned
reference NAME@sha256:<image id> is printed on stdout; progress goes to
stderr.

With --require-digest sha256:<id>, the import is refused unless the image
is exactly that one: its ID, the sha256 of its config, computed from the
verified bytes, must be the digest given. From an OCI layout that holds
several images (as 'airlock image export' writes for several references),
it picks that image.

A compressed layer can expand about 32,000 times over (a 1 MB blob to
32 GB), so every layer's uncompressed bytes are counted as they are read.
An image is refused, and nothing imported, as soon as one layer passes
--max-layer-size or its layers together pass --max-image-size. Raise them
for an image that really is that large.`,
		Example: `  airlock image import ./python-oci/
  airlock image import --name team/py python.tar
  airlock image import --max-layer-size 24GiB --max-image-size 40GiB cuda.tar
  airlock image import --rootfs rootfs.tar --name airlock/default --env PATH=/usr/bin:/bin --default
  airlock image import --require-digest sha256:1570e2743829cb8385be533b26f71b7b02a995006f7dc145aadb99087f961a06 default.tar`,
		Args: exactArgs(1, "give the path of one image archive or layout"),
		RunE: func(cmd *cobra.Command, args []string) error { return runImport(cmd, g, f, args[0]) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.name, "name", "", "name to show with the digest (default: from the archive, else the file name)")
	fl.BoolVar(&f.rootfs, "rootfs", false, "treat PATH as a root filesystem tar (use with --env, --workdir, --user)")
	fl.StringArrayVar(&f.env, "env", nil, "with --rootfs: image environment NAME=VALUE (repeatable)")
	fl.StringVar(&f.workdir, "workdir", "/", "with --rootfs: image working directory")
	fl.StringVar(&f.user, "user", "65534:65534", "with --rootfs: image default user")
	fl.BoolVar(&f.setDefault, "default", false, "make this the image 'airlock run' uses without --image")
	fl.StringVar(&f.recipe, "recipe", "", "with --default: sha256 of the recipe that built the image, recorded in the lock")
	fl.StringVar(&f.requireDigest, "require-digest", "", "refuse the archive unless its image ID is exactly this sha256:<id>")
	fl.StringVar(&f.maxLayer, "max-layer-size", images.DefaultMaxLayerSize.String(), "refuse the image if one of its layers holds more than this uncompressed")
	fl.StringVar(&f.maxImage, "max-image-size", images.DefaultMaxImageSize.String(), "refuse the image if its layers hold more than this uncompressed in all")
	return cmd
}

func exactArgs(n int, hint string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError{fmt.Errorf("%s takes %d argument(s), got %d: %s", cmd.CommandPath(), n, len(args), hint)}
		}
		return nil
	}
}

func runImport(cmd *cobra.Command, g *globals, f *importFlags, path string) error {
	eng, err := g.host().DockerImages()
	if err != nil {
		return err
	}
	defer eng.Close()
	ref, err := importImage(cmd.Context(), g, f, path, eng, progress(cmd.ErrOrStderr()))
	if err != nil {
		return err
	}
	fmt.Fprintln(cmd.OutOrStdout(), ref.String())
	return nil
}

// importImage parses the import's flags and imports path through eng.
func importImage(ctx context.Context, g *globals, f *importFlags, path string, eng images.Loader, step images.Progress) (images.Ref, error) {
	opt := images.ImportOptions{Root: g.root, Name: f.name, SetDefault: f.setDefault, Recipe: f.recipe, Loader: eng, Progress: step}
	if f.requireDigest != "" {
		r, err := images.ParseRef(f.requireDigest)
		if err != nil || r.Name != "" {
			return images.Ref{}, usageError{fmt.Errorf("--require-digest %q: give the image ID as sha256:<64 hex digits>, as `airlock image ls` prints it after the @", f.requireDigest)}
		}
		opt.RequireDigest = r.ID
	}
	for _, c := range []struct {
		flag, v string
		dst     *units.Bytes
	}{{"--max-layer-size", f.maxLayer, &opt.Limits.Layer}, {"--max-image-size", f.maxImage, &opt.Limits.Image}} {
		if c.v == "" {
			continue // the default
		}
		n, err := units.ParseBytes(c.v)
		if err != nil || n <= 0 {
			return images.Ref{}, usageError{fmt.Errorf("%s %q: give a positive size such as 16GiB", c.flag, c.v)}
		}
		*c.dst = n
	}
	if f.rootfs {
		opt.Rootfs = &images.RootfsConfig{Env: f.env, WorkingDir: f.workdir, User: f.user, Created: time.Unix(0, 0)}
	}
	return images.Import(ctx, path, opt)
}

// progress prints timestamped steps to w.
func progress(w io.Writer) images.Progress {
	start := time.Now()
	return func(format string, args ...any) {
		fmt.Fprintf(w, "[%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
}

type imageRow struct {
	images.Record
	Ref string `json:"ref"`
	// InStore and InDocker say which engines can run it.
	InStore  bool `json:"in_store"`
	InDocker bool `json:"in_docker"`
	Default  bool `json:"default"`
}

func newImageLsCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List imported images with their pinned references",
		Long: `List the images airlock has imported, newest first, with the pinned
reference to pass to --image, and whether the engine still holds each one.`,
		Args: exactArgs(0, "ls takes no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			rows, err := listImages(cmd, g)
			if err != nil {
				return err
			}
			if asJSON {
				if rows == nil {
					rows = []imageRow{}
				}
				return writeJSON(cmd.OutOrStdout(), rows)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "REFERENCE\tSIZE\tIMPORTED\tSTORE\tDOCKER\tDEFAULT")
			for _, r := range rows {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Ref, units.Bytes(r.Size).Approx(), r.ImportedAt.Format(time.RFC3339), yesNo(r.InStore), yesNo(r.InDocker), yesNo(r.Default))
			}
			if len(rows) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no images yet: `make setup` builds the default image; `airlock image import PATH` adds others")
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array")
	return cmd
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func listImages(cmd *cobra.Command, g *globals) ([]imageRow, error) {
	idx := images.OpenIndex(filepath.Join(g.root, "images"))
	recs, err := idx.List()
	if err != nil {
		return nil, err
	}
	_, def, _ := idx.Default()
	st, err := store.Open(filepath.Join(g.root, "store"))
	if err != nil {
		return nil, err
	}
	eng, err := g.host().DockerImages()
	if err != nil {
		return nil, err
	}
	defer eng.Close()
	docker := eng.Ping(cmd.Context()) == nil
	var rows []imageRow
	for _, r := range recs {
		row := imageRow{Record: r, Ref: r.Ref().String(), InStore: st.Has(r.ID), Default: r.ID == def.ID}
		if docker {
			if row.InDocker, err = eng.HasImage(cmd.Context(), r.ID.String()); err != nil {
				return nil, err
			}
		}
		rows = append(rows, row)
	}
	return rows, nil
}

func newImageDefaultCmd(g *globals) *cobra.Command {
	var recipe string
	cmd := &cobra.Command{
		Use:   "default",
		Short: "Print the default image's pinned reference; fail if it is missing",
		Long: `Print the reference recorded in the default-image lock. Exits 66 when there
is no lock, when airlock's store or a reachable dockerd does not hold the
image, or when --recipe is
given and differs from the recipe the image was built from (setup uses this
to skip a rebuild).`,
		Args: exactArgs(0, "default takes no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			lock, ref, err := images.OpenIndex(filepath.Join(g.root, "images")).Default()
			if err != nil {
				return fmt.Errorf("%w: %w", errdefs.ErrNotFound, err)
			}
			if recipe != "" && lock.Recipe != recipe {
				return fmt.Errorf("%w: the default image was built from recipe %q, not %q; rebuild it with `make setup`", errdefs.ErrNotFound, lock.Recipe, recipe)
			}
			st, err := store.Open(filepath.Join(g.root, "store"))
			if err != nil {
				return err
			}
			if !st.Has(ref.ID) {
				return fmt.Errorf("%w: the default image %s is not in airlock's store; rebuild it with `make setup`", errdefs.ErrNotFound, ref)
			}
			eng, err := g.host().DockerImages()
			if err != nil {
				return err
			}
			defer eng.Close()
			if eng.Ping(cmd.Context()) == nil {
				present, err := eng.HasImage(cmd.Context(), ref.ID.String())
				if err != nil {
					return err
				}
				if !present {
					return fmt.Errorf("%w: the default image %s is not in dockerd; rebuild it with `make setup`", errdefs.ErrNotFound, ref)
				}
			}
			fmt.Fprintln(cmd.OutOrStdout(), ref)
			return nil
		},
	}
	cmd.Flags().StringVar(&recipe, "recipe", "", "fail unless the image was built from this recipe hash")
	return cmd
}

func newImageRmCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "rm IMAGE...",
		Short: "Remove imported images and free their space",
		Long: `Remove each image, named by its pinned reference (NAME@sha256:<id> or
sha256:<id>, as 'airlock image ls' prints it): from airlock's index, from
airlock's store (its unpacked root filesystem and every blob no other image
shares), and from dockerd when it is reachable and holds it.

An image a running sandbox uses is kept, with an error: remove it once the
run ends. The default image is kept too: it is what 'airlock run' uses
without --image ('make setup' builds it again if it goes).`,
		Example: `  airlock image rm airlock/busybox@sha256:628fac27fd8ab2c52b15859160b78fd321083e81e064702455c937d0b7a9d58a
  airlock image ls --json | jq -r '.[] | select(.default | not) | .ref' | xargs -r airlock image rm`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{errors.New("give at least one image reference; `airlock image ls` lists them")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var errs []error
			for _, a := range args {
				if err := removeImage(cmd, g, a); err != nil {
					errs = append(errs, fmt.Errorf("removing %s: %w", a, err))
				}
			}
			return errors.Join(errs...)
		},
	}
	return cmd
}

func removeImage(cmd *cobra.Command, g *globals, arg string) error {
	ref, err := images.ParseRef(arg)
	if err != nil {
		return usageError{err}
	}
	idx := images.OpenIndex(filepath.Join(g.root, "images"))
	if _, def, err := idx.Default(); err == nil && def.ID == ref.ID {
		return fmt.Errorf("%w: %s is the default image, which `airlock run` uses without --image; it is kept", errdefs.ErrInvalidArgument, ref.ID)
	}
	st, err := store.Open(filepath.Join(g.root, "store"))
	if err != nil {
		return err
	}
	// Nothing is removed from either engine while either uses the image.
	inUse := errors.New("a running sandbox uses it; remove it once the run ends or the sandbox is removed (`airlock ps` and `airlock sandbox ls` list them)")
	// A sandbox's supervisor pins its image for the sandbox's life and
	// lets go within a second of its end: a sandbox just removed gets
	// that long.
	for wait := 0; st.InUse(ref.ID); wait++ {
		if wait == 20 {
			return fmt.Errorf("%w: %w", errdefs.ErrConflict, inUse)
		}
		time.Sleep(100 * time.Millisecond)
	}
	eng, err := g.host().DockerImages()
	if err == nil {
		defer eng.Close()
		if eng.Ping(cmd.Context()) != nil {
			eng = nil
		}
	}
	if eng != nil {
		if used, err := eng.ImageInUse(cmd.Context(), ref.ID); err != nil {
			return err
		} else if used {
			return fmt.Errorf("%w: %w", errdefs.ErrConflict, inUse)
		}
	}
	var did []string
	if eng != nil {
		removed, err := eng.RemoveImage(cmd.Context(), ref.ID)
		if err != nil {
			return err
		}
		if removed {
			did = append(did, "dockerd: removed")
		}
	}
	if st.Has(ref.ID) {
		freed, err := st.Remove(cmd.Context(), ref.ID)
		if err != nil {
			return err
		}
		did = append(did, fmt.Sprintf("store: %d blob(s), %s freed", freed.Blobs, units.Bytes(freed.Bytes).Approx()))
	}
	inIndex, err := idx.Remove(ref.ID)
	if err != nil {
		return err
	}
	if len(did) == 0 && !inIndex {
		return fmt.Errorf("%w: image %s is not imported (`airlock image ls` lists what is)", errdefs.ErrNotFound, ref.ID)
	}
	if len(did) == 0 {
		did = append(did, "index only: no engine held it")
	}
	fmt.Fprintf(cmd.OutOrStdout(), "removed %s (%s)\n", ref, strings.Join(did, "; "))
	return nil
}
