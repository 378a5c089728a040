package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/engine/docker"
	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
)

func newHostCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "host",
		Short: "Prepare this host for airlock",
	}
	cmd.AddCommand(newInstallRuntimeCmd(g))
	return cmd
}

func newInstallRuntimeCmd(g *globals) *cobra.Command {
	var runsc, daemonJSON, name string
	var args []string
	var replace bool
	cmd := &cobra.Command{
		Use:   "install-runtime --runsc PATH [--name NAME]",
		Short: "Register airlock's runsc with dockerd in daemon.json",
		Long: fmt.Sprintf(`Add (or update) this root's runsc runtime in dockerd's daemon.json,
pointing at the runsc binary given. Every other setting in the file is kept;
an existing file is first copied to a timestamped backup beside it. Prints
"changed" or "unchanged". dockerd reads runtimes again on SIGHUP; 'make
setup' sends it.

The default root (%s) registers the runtime %q. Any other root registers
a name of its own, %q followed by a hash of the root's path, unless --name
chooses one; the name is recorded in <root>/%s, and that root's docker
engine runs under it. An entry of that name that runs another runsc is
another installation's and is refused: choose another --name, or pass
--replace once nothing uses that runsc any more.

By default runsc gets --network=none, --oci-seccomp (so that it applies the
seccomp profile airlock passes), and a log per sandbox under
<root>/sandbox-logs/<container id>/ (a directory only root can read), which
airlock reads to tell a sandbox killed from the host apart from the
program's own exit, then removes. 'airlock doctor' checks the registration
against exactly these flags.`, runner.DefaultRoot, docker.DefaultRuntime, docker.DefaultRuntime, runtimeRecord),
		Args: exactArgs(0, "pass the runsc path with --runsc"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			abs, err := filepath.Abs(runsc)
			if err != nil {
				return usageError{err}
			}
			root, err := filepath.Abs(g.root)
			if err != nil {
				return usageError{err}
			}
			fi, err := os.Stat(abs)
			if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
				return fmt.Errorf("%w: --runsc %q is not an executable file; build it with `make setup`", errdefs.ErrNotFound, runsc)
			}
			if !cmd.Flags().Changed("runtime-arg") {
				args = defaultRuntimeArgs(root)
			}
			if name == "" {
				if name, err = dockerRuntime(root); err != nil {
					return err
				}
			} else if err := checkRuntimeName(name); err != nil {
				return usageError{err}
			}
			if err := privateDir(filepath.Join(root, "sandbox-logs")); err != nil {
				return err
			}
			changed, backup, err := docker.RegisterRuntime(daemonJSON, name, docker.Runtime{Path: abs, RuntimeArgs: args}, replace)
			if err != nil {
				return err
			}
			if backup != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "backed up %s to %s\n", daemonJSON, backup)
			}
			if err := recordRuntime(root, name); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "runtime %q runs %s for root %s\n", name, abs, root)
			if changed {
				fmt.Fprintln(cmd.OutOrStdout(), "changed")
			} else {
				fmt.Fprintln(cmd.OutOrStdout(), "unchanged")
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&runsc, "runsc", "", "path of the runsc binary (required)")
	cmd.Flags().StringVar(&name, "name", "", "runtime name to register (default: the root's recorded name, else "+docker.DefaultRuntime+" for the default root and "+docker.DefaultRuntime+"-<hash of the root> for any other)")
	cmd.Flags().BoolVar(&replace, "replace", false, "re-point an entry of that name that runs another runsc (only once nothing uses it)")
	cmd.Flags().StringVar(&daemonJSON, "daemon-json", docker.DaemonJSON, "dockerd configuration file")
	cmd.Flags().StringArrayVar(&args, "runtime-arg", nil, "runsc flag for every container (repeatable; replaces the defaults above, and `airlock doctor` then reports the difference)")
	cmd.MarkFlagRequired("runsc")
	return cmd
}

// defaultRuntimeArgs are the runsc flags dockerd passes for airlock.
func defaultRuntimeArgs(root string) []string {
	return append(isolation.RunscFlags(),
		engine.GVisorLogFlags(filepath.Join(root, "sandbox-logs", "%ID%"), "boot")...)
}

// runtimeRecord, under a root, holds the name its runsc is registered
// under with dockerd.
const runtimeRecord = "docker-runtime"

var runtimeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

func checkRuntimeName(name string) error {
	if !runtimeNameRE.MatchString(name) {
		return fmt.Errorf("%w: runtime name %q: use up to 64 letters, digits, '_', '.' or '-', starting with a letter or digit", errdefs.ErrInvalidArgument, name)
	}
	return nil
}

// recordedRuntime is the name recorded in root, if any.
func recordedRuntime(root string) (string, bool, error) {
	p := filepath.Join(root, runtimeRecord)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("reading %s: %w", p, err)
	}
	name := strings.TrimSpace(string(b))
	if err := checkRuntimeName(name); err != nil {
		return "", false, fmt.Errorf("%s: %w; register the root's runsc again with `airlock host install-runtime --name NAME`", p, err)
	}
	return name, true, nil
}

// dockerRuntime is the name install-runtime registers root's runsc under:
// the recorded one, else docker.DefaultRuntime for the default root and a
// name derived from the path for any other.
func dockerRuntime(root string) (string, error) {
	name, ok, err := recordedRuntime(root)
	if err != nil || ok {
		return name, err
	}
	root = filepath.Clean(root)
	if root == runner.DefaultRoot {
		return docker.DefaultRuntime, nil
	}
	sum := sha256.Sum256([]byte(root))
	return docker.DefaultRuntime + "-" + hex.EncodeToString(sum[:])[:10], nil
}

// engineRuntime is the runtime root's docker engine runs gVisor under: the
// recorded name, else docker.DefaultRuntime (a root that registered
// nothing of its own uses the default root's).
func engineRuntime(root string) (string, error) {
	name, ok, err := recordedRuntime(root)
	if err != nil || ok {
		return name, err
	}
	return docker.DefaultRuntime, nil
}

// recordRuntime records name in root, for its docker engine.
func recordRuntime(root, name string) error {
	p := filepath.Join(root, runtimeRecord)
	if err := atomicfile.WriteFile(p, []byte(name+"\n"), 0o600); err != nil {
		return fmt.Errorf("recording the runtime name in %s: %w", p, err)
	}
	return nil
}

// privateDir makes dir, or narrows it, to mode 0700.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("making %s private: %w", dir, err)
	}
	return nil
}
