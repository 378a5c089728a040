package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/images"
	"github.com/airlock-sandbox/airlock/store"
)

func newImageExportCmd(g *globals) *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "export IMAGE... -o FILE",
		Short: "Write images from airlock's store as a verified OCI layout tar",
		Long: `Write each image, named by its pinned reference (NAME@sha256:<id> or
sha256:<id>, as 'airlock image ls' prints it), from airlock's store into
FILE: a tar of one OCI image layout. Every blob is checked against its
digest and size on the way out, and manifests and configs are copied byte
for byte, so 'airlock image import' of FILE on another host yields the same
image IDs. Pass the ID to 'airlock image import --require-digest' there to
refuse any other image. FILE appears only when the export is complete.`,
		Example: `  airlock image export "$(airlock image default)" -o default.tar
  airlock image import --require-digest sha256:<id> default.tar   # on the other host`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{errors.New("give at least one image reference; `airlock image ls` lists them")}
			}
			if out == "" {
				return usageError{errors.New("give the output file with -o FILE")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			var refs []images.Ref
			for _, a := range args {
				r, err := images.ParseRef(a)
				if err != nil {
					return usageError{err}
				}
				refs = append(refs, r)
			}
			st, err := store.Open(filepath.Join(g.root, "store"))
			if err != nil {
				return fmt.Errorf("%w: opening the image store: %v", errdefs.ErrUnavailable, err)
			}
			for _, r := range refs {
				if !st.Has(r.ID) {
					return fmt.Errorf("%w: image %s is not in airlock's store under %s (`airlock image ls` lists what is)", errdefs.ErrNotFound, r, g.root)
				}
			}
			return exportTo(cmd, st, refs, out)
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "file to write (required)")
	return cmd
}

// exportTo writes the layout tar beside out and renames it into place
// only when it is complete.
func exportTo(cmd *cobra.Command, st *store.Store, refs []images.Ref, out string) (err error) {
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".tmp-*")
	if err != nil {
		return fmt.Errorf("creating %s: %w", out, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := images.Export(cmd.Context(), st, refs, f, progress(cmd.ErrOrStderr())); err != nil {
		if errors.Is(err, images.ErrDigest) || errors.Is(err, store.ErrDigest) {
			return fmt.Errorf("%w: %w; the store is damaged: remove the image and import it again", errdefs.ErrDataLoss, err)
		}
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	if err := os.Rename(f.Name(), out); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	for _, r := range refs {
		fmt.Fprintln(cmd.OutOrStdout(), r.ID)
	}
	return nil
}
