package main

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/runner"
)

// exitRefused is a transfer the rules refused (EX_DATAERR): a path out of
// the areas, a symlink, a FIFO, a type off the allowlist, a file too big.
const exitRefused = 65

func newCpCmd(g *globals) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "cp [flags] SRC DST",
		Short: "Copy a file into or out of a live sandbox",
		Long: `Copy one file between this machine and a live sandbox; exactly one of SRC
and DST is ID:PATH (docker's convention).

Upload (host → sandbox) writes only into the workspace /home/user or /tmp,
within their caps, and never follows a symlink: not on this machine, and
not one the program planted in the sandbox. '..' and paths outside those
areas are refused. Download (sandbox → host) reads from the workspace,
/tmp or the output directory through the artifact scanner: links, FIFOs,
devices and directories are refused, sizes are checked before reading, and
the type, detected from the content, must be on the sandbox's
--download-types allowlist. The host file is created new (never
overwriting, never through a symlink); DST may be an existing directory.

A refused transfer exits 65 and names its reason word (invalid_path,
not_found, symlink, not_regular, is_directory, too_large, type_not_allowed,
no_space, …); --json prints the decision: the transfer record with its
size, sha256 and type, or the refusal with its reason.`,
		Example: `  airlock cp data.csv sb-0804d69789f28334e665:/home/user/data.csv
  airlock cp sb-0804d69789f28334e665:/home/user/out/result.csv ./result.csv
  airlock cp --json sb-0804d69789f28334e665:/tmp/report.json . | jq .sha256`,
		Args: exactArgs(2, "give SRC and DST, exactly one of them ID:PATH"),
		RunE: func(cmd *cobra.Command, args []string) error { return runCp(cmd, g, args[0], args[1], asJSON) },
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the decision as one JSON object")
	return cmd
}

// remote splits ID:PATH; a path with a '/' before any ':' is local.
func remote(s string) (id, p string, ok bool) {
	i := strings.IndexByte(s, ':')
	if i <= 0 || strings.Contains(s[:i], "/") {
		return "", "", false
	}
	return s[:i], s[i+1:], true
}

func runCp(cmd *cobra.Command, g *globals, src, dst string, asJSON bool) error {
	sid, spath, sok := remote(src)
	did, dpath, dok := remote(dst)
	if sok == dok {
		return usageError{errors.New("exactly one of SRC and DST must be ID:PATH, for example `airlock cp file.txt sb-…:/home/user/file.txt`")}
	}
	id := sid
	if dok {
		id = did
	}
	if err := runner.CheckSandboxID(id); err != nil {
		return err
	}
	r, done, err := g.sandboxRunner(id)
	if err != nil {
		return err
	}
	defer done()
	sb, err := r.Open(cmd.Context(), id)
	if err != nil {
		return err
	}
	var tr runner.Transfer
	if dok {
		tr, err = upload(cmd, sb, src, dpath)
	} else {
		tr, err = download(cmd, sb, spath, dst)
	}
	var te *runner.TransferError
	refused := errors.As(err, &te)
	if asJSON && (err == nil || refused) {
		if werr := writeJSON(cmd.OutOrStdout(), tr); werr != nil {
			return werr
		}
	}
	if refused {
		fmt.Fprintf(cmd.ErrOrStderr(), "airlock: %v\n", err)
		return &exitErr{code: exitRefused}
	}
	return err
}

func upload(cmd *cobra.Command, sb *runner.Sandbox, host, p string) (runner.Transfer, error) {
	f, err := os.OpenFile(host, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return runner.Transfer{}, fmt.Errorf("%w: %s is a symlink; airlock never follows one: name its target", errdefs.ErrInvalidArgument, host)
		}
		return runner.Transfer{}, fmt.Errorf("%w: opening %s: %v", errdefs.ErrNotFound, host, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return runner.Transfer{}, fmt.Errorf("%w: %v", errdefs.ErrUnavailable, err)
	}
	if !fi.Mode().IsRegular() {
		return runner.Transfer{}, fmt.Errorf("%w: %s is not a regular file (%s); airlock cp copies one file", errdefs.ErrInvalidArgument, host, fi.Mode().Type())
	}
	if strings.HasSuffix(p, "/") {
		p += filepath.Base(host)
	}
	// One byte more than the file, so that a file growing while read is
	// refused rather than cut.
	return sb.Upload(cmd.Context(), p, f, fi.Size()+1)
}

func download(cmd *cobra.Command, sb *runner.Sandbox, p, host string) (runner.Transfer, error) {
	if fi, err := os.Stat(host); err == nil && fi.IsDir() {
		host = filepath.Join(host, path.Base(p))
	}
	f, err := os.OpenFile(host, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrExist) {
			return runner.Transfer{}, fmt.Errorf("%w: %s exists; airlock cp never overwrites: remove it or name another file", errdefs.ErrInvalidArgument, host)
		}
		return runner.Transfer{}, fmt.Errorf("%w: creating %s: %v", errdefs.ErrUnavailable, host, err)
	}
	tr, err := sb.Download(cmd.Context(), p, f)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("%w: writing %s: %v", errdefs.ErrUnavailable, host, cerr)
	}
	if err != nil {
		os.Remove(host)
	}
	return tr, err
}
