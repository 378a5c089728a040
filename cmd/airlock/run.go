package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/internal/termsafe"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/units"
	"github.com/airlock-sandbox/airlock/wire"
)

type runFlags struct {
	image, timeout, memory, cpus, output, tmp, engine, isolation, stdin, fileSize, seccompProfile string
	pids                                                                                          int64
	env                                                                                           []string
	json                                                                                          bool
	// allowHost, credential and egressLimit are the sandbox's egress
	// (docs/egress.md).
	allowHost, credential []string
	egressLimit           string
	// template names the sandbox template to run on.
	template string

	inputs                                                 []string
	inputLimit, workdir                                    string
	outDir, outLimit, maxArtifact, types, dest, quarantine string
	outFiles                                               int
	allowDotfiles                                          bool
	// kube is where --engine kube runs.
	kube kubeFlags
}

func newRunCmd(g *globals) *cobra.Command {
	f := &runFlags{}
	cmd := &cobra.Command{
		Use:   "run [flags] -- COMMAND [ARG...]",
		Short: "Run a command in a fresh sandbox and report how it ended",
		Long: `Run COMMAND, as an argv (never through a shell), in a fresh sandbox made from
a digest-pinned image. Without --image the default image built by setup is
used (Debian with python3, numpy, matplotlib and pip).

The sandbox has no network, no capabilities, no-new-privileges, a read-only
root with a size-capped tmpfs at /tmp, uid 65534, and only the environment
given with --env. stdin is closed unless --stdin is given.

Without --json, the program's output streams live (control sequences are
escaped when the destination is a terminal) and airlock exits with the
program's exit code. With --json, airlock prints exactly one JSON object
and nothing else on stdout; when airlock itself fails, that object carries
the error and the same one-line message goes to stderr.

--template NAME runs on a sandbox template (airlock template ls): its image,
isolation, limits, env and output settings, which the flags given may
narrow but never widen (a wider flag is refused, exit 64). A template with
a snapshot (template create --warm or --run-code) restores the run's
sandbox from it instead of booting, when the run fits the snapshot (no
--input, no narrowed policy); on a run-code template, python3 -c CODE and
python3 FILE are one job of its fork server (docs/snapshots.md).

Sizes take units (512MiB, 1.5GiB, 100MB); durations too (30s, 1m, 500ms).

--engine kube --template NAME runs COMMAND once on a Kubernetes cluster
instead: in a pod of its own made from the SandboxTemplate NAME that
airlock kube render made (its policy; policy flags are refused), on an
airlock node (docs/kubernetes.md). airlock waits for the pod's end
(--ready-timeout bounds its start, the template's TTL its run), prints its
log (stdout and stderr as one stream), exits with its exit code or
airlock's code for the node's reason (timeout, oom…), and deletes the pod.
--kubeconfig (default $KUBECONFIG), --context and --namespace say where.`,
		Example: `  airlock run -- python3 -c 'print(6*7)'
  airlock run --json --timeout 5s -- python3 -c 'while True: pass'
  airlock run --template py --memory 128MiB -- python3 -c 'print(6*7)'
  airlock run --image airlock/default@sha256:<64 hex> --env SEED=1 -- python3 -c 'import os; print(os.environ["SEED"])'
  airlock run --stdin input.txt -- python3 -c 'import sys; print(len(sys.stdin.read()))'
  cat job.py | airlock run --stdin - -- python3 -`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError{fmt.Errorf("no command given: put it after `--`, for example `airlock run -- python3 -c 'print(1)'`")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runRun(cmd, g, f, args) },
	}
	addRunFlags(cmd, f)
	f.kube.add(cmd.Flags(), "how long to wait for the pod to start")
	cmd.Flags().Lookup("engine").Usage = "engine: oci (daemonless runsc), docker (Docker Engine API), auto (oci where root and setup's runsc are available, else docker), or kube (a pod of --template's SandboxTemplate on a Kubernetes cluster)"
	cmd.Flags().BoolVar(&f.json, "json", false, "print one JSON result object on stdout instead of streaming output")
	cmd.Flags().SortFlags = false
	return cmd
}

// addRunFlags defines the flags that shape a run, shared by run, batch and
// sandbox create.
func addRunFlags(cmd *cobra.Command, f *runFlags) { addShapeFlags(cmd, f, true) }

// addPolicyFlags defines the flags a template keeps: a run's, but for its
// command's own files and the template to run on.
func addPolicyFlags(cmd *cobra.Command, f *runFlags) { addShapeFlags(cmd, f, false) }

func addShapeFlags(cmd *cobra.Command, f *runFlags, job bool) {
	d := isolation.Default()
	fl := cmd.Flags()
	if job {
		fl.StringVar(&f.template, "template", "", "run on this sandbox template (airlock template ls); the flags given may narrow it, never widen it")
	}
	fl.StringVar(&f.image, "image", "", "digest-pinned image: NAME@sha256:<64 hex> or sha256:<64 hex> (default: the image built by setup)")
	fl.StringVar(&f.timeout, "timeout", d.Limits.Timeout.String(), "wall-clock limit, from the program's start")
	fl.StringVar(&f.memory, "memory", d.Limits.Memory.String(), "memory limit (no swap on top)")
	fl.StringVar(&f.cpus, "cpus", d.Limits.CPUs.String(), "CPU limit, in CPUs (0.5, 1, 2)")
	fl.Int64Var(&f.pids, "pids", d.Limits.Pids, "limit on processes and threads")
	fl.StringVar(&f.output, "output-limit", d.Limits.Output.String(), "cap on each of stdout and stderr; passing it kills the sandbox")
	fl.StringVar(&f.tmp, "tmp-size", d.Limits.Tmp.String(), "size of the writable tmpfs at /tmp")
	fl.StringVar(&f.fileSize, "file-size", d.Limits.FileSize.String(), "largest file the program may write (RLIMIT_FSIZE)")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "set an environment variable NAME=VALUE (repeatable)")
	fl.StringVar(&f.engine, "engine", "auto", "engine: oci (daemonless runsc), docker (Docker Engine API), or auto (oci where root and setup's runsc are available, else docker)")
	fl.StringVar(&f.isolation, "isolation", string(isolation.GVisor), "isolation mode: gvisor (runsc, with the seccomp profile as a second layer) or seccomp (runc behind the seccomp allowlist)")
	fl.StringVar(&f.seccompProfile, "seccomp-profile", "", "seccomp profile FILE (Docker/OCI JSON) instead of airlock's default; airlock seccomp export default prints the default")
	fl.StringArrayVar(&f.allowHost, "allow-host", nil, "let the sandbox reach HOST[:PORT] through its egress proxy (repeatable; *.NAME for the names below NAME; default: no network at all; docs/egress.md)")
	fl.StringArrayVar(&f.credential, "credential", nil, "have the egress proxy set a header on requests to a host, HOST=HEADER:ENV (from airlock's environment) or HOST=HEADER:@FILE; the value never enters the sandbox (repeatable)")
	fl.StringVar(&f.egressLimit, "egress-limit", "", "cap on the bytes the egress proxy moves for the sandbox, both ways, over its whole life (default "+isolation.DefaultEgressBytes.String()+"); past it, connections are cut")
	f.inputLimit = "256MiB"
	if job {
		fl.StringVar(&f.stdin, "stdin", "", "feed this file to the program's stdin; - reads airlock's own stdin")
		fl.StringArrayVar(&f.inputs, "input", nil, "copy HOSTPATH[:SANDBOXPATH] in, read-only (default under /work; repeatable; symlinks inside are not followed)")
		fl.StringVar(&f.inputLimit, "input-limit", f.inputLimit, "cap on the total size of --input")
	}
	fl.StringVar(&f.workdir, "workdir", "", "working directory of the program (default: the image's)")
	fl.StringVar(&f.outDir, "out-dir", "/out", "the sandbox's writable output directory, or none")
	fl.StringVar(&f.outLimit, "out-limit", "64MiB", "size of the output directory (kernel-enforced) and cap on all artifacts")
	fl.IntVar(&f.outFiles, "out-files", 1000, "cap on the number of files in the output directory")
	fl.StringVar(&f.maxArtifact, "artifact-max-size", "", "cap on one artifact (default: --out-limit)")
	fl.StringVar(&f.types, "artifact-types", strings.Join(artifacts.DefaultTypes, ","), "MIME types an artifact may have, comma-separated")
	if job {
		fl.StringVar(&f.dest, "artifacts", "", "copy accepted artifacts to this host directory (default: check and report only)")
		fl.StringVar(&f.quarantine, "quarantine", "", "keep readable rejected files in this host directory, under escaped names")
		fl.BoolVar(&f.allowDotfiles, "artifacts-allow-dotfiles", false, "deliver paths with a component starting with '.' (.git, .ssh, .bashrc); refused by default because tools act on them")
	}
}

// wire is the flags' policy in the one wire form every face parses.
func (f *runFlags) wire() wire.Policy {
	w := wire.Policy{
		Isolation: f.isolation, Timeout: f.timeout, Memory: f.memory, CPUs: wire.Number(f.cpus), Pids: &f.pids,
		OutputLimit: f.output, TmpSize: f.tmp, FileSize: f.fileSize, OutDir: f.outDir,
		AllowHost: f.allowHost, Credential: f.credential, EgressLimit: f.egressLimit,
	}
	if f.outDir != "none" {
		types := []string{}
		if f.types != "" {
			types = strings.Split(f.types, ",")
		}
		w.OutLimit, w.OutFiles, w.ArtifactMaxSize, w.ArtifactTypes = f.outLimit, &f.outFiles, f.maxArtifact, types
		w.ArtifactsAllowDotfiles = f.allowDotfiles
	}
	return w
}

// asFlag words a refused wire field as its flag: a usage error.
func asFlag(err error) error {
	var we *wire.Error
	if errors.As(err, &we) {
		return usageError{errors.New(we.AsFlag())}
	}
	return usageError{err}
}

// policy converts the flags, refusing anything malformed.
func (f *runFlags) policy() (isolation.Policy, error) {
	// An empty value would read as "not given", the default: refused.
	for _, e := range []struct{ flag, v string }{
		{"--isolation", f.isolation}, {"--timeout", f.timeout}, {"--memory", f.memory}, {"--cpus", f.cpus},
		{"--output-limit", f.output}, {"--tmp-size", f.tmp}, {"--file-size", f.fileSize},
	} {
		if strings.TrimSpace(e.v) == "" {
			return isolation.Policy{}, usageError{fmt.Errorf("%s is empty; give a value, or leave the flag out for the default", e.flag)}
		}
	}
	w := f.wire()
	p, err := w.Parse()
	if err != nil {
		return p, asFlag(err)
	}
	// The runner validates the whole policy once the profile is loaded.
	return p.WithDefaults(), nil
}

func runRun(cmd *cobra.Command, g *globals, f *runFlags, argv []string) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	res, err := runOnce(cmd, g, f, argv)
	if f.json {
		if err != nil && res.ID == "" {
			res = runner.Result{Reason: runner.ReasonError, ExitCode: -1}
		}
		if err != nil {
			res.Error, res.ErrorKind = err.Error(), errorKind(err)
		}
		if encErr := writeJSON(stdout, res); encErr != nil {
			return encErr
		}
		if err != nil {
			// stdout may be going to jq: say why here too.
			sayf(stderr, "%v", err)
		}
		return &exitErr{code: resultCode(res, err)}
	}
	if err != nil {
		return err
	}
	if msg := ending(res); msg != "" {
		sayf(stderr, "%s", msg)
	}
	return &exitErr{code: resultCode(res, nil)}
}

func runOnce(cmd *cobra.Command, g *globals, f *runFlags, argv []string) (runner.Result, error) {
	if f.engine == "kube" {
		return runKube(cmd, g, f, argv)
	}
	if err := checkKubeFlags(cmd, false); err != nil {
		return runner.Result{}, err
	}
	pol, err := f.policy()
	if err != nil {
		return runner.Result{}, err
	}
	spec := runner.Spec{Image: f.image, Argv: argv, Env: f.env, Policy: pol, Workdir: f.workdir, SeccompProfile: f.seccompProfile}
	if err := f.files(&spec); err != nil {
		return runner.Result{}, err
	}
	spec, engineName, err := g.templated(cmd, f, spec)
	if err != nil {
		return runner.Result{}, err
	}
	in, closeIn, err := openStdin(cmd, f.stdin)
	if err != nil {
		return runner.Result{}, err
	}
	defer closeIn()
	spec.Stdin = in
	if !f.json {
		out, errw := liveWriter(cmd.OutOrStdout()), liveWriter(cmd.ErrOrStderr())
		spec.Stdout, spec.Stderr = out, errw
		defer flush(out)
		defer flush(errw)
	}
	return g.service(engineName).Run(cmd.Context(), "", f.template, spec)
}

// files converts the input and output flags.
func (f *runFlags) files(spec *runner.Spec) error {
	var err error
	if spec.InputLimit, err = units.ParseBytes(f.inputLimit); err != nil {
		return usageError{fmt.Errorf("--input-limit: %w", err)}
	}
	if spec.InputLimit == 0 {
		return usageError{fmt.Errorf("--input-limit 0: give a positive size, or drop --input")}
	}
	for _, in := range f.inputs {
		host, sandbox, _ := strings.Cut(in, ":")
		if host == "" {
			return usageError{fmt.Errorf("--input %q: use HOSTPATH or HOSTPATH:SANDBOXPATH", in)}
		}
		if sandbox != "" && !path.IsAbs(sandbox) {
			sandbox = path.Join("/work", sandbox)
		}
		spec.Inputs = append(spec.Inputs, runner.Input{Host: host, Sandbox: sandbox})
	}
	return f.outputs(&spec.Output)
}

// outputs converts the output directory flags.
func (f *runFlags) outputs(o *runner.Output) error {
	if f.outDir == "none" && (f.dest != "" || f.quarantine != "") {
		return usageError{fmt.Errorf("--artifacts and --quarantine need an output directory; drop --out-dir none")}
	}
	if f.outDir != "none" && strings.TrimSpace(f.outLimit) == "" {
		return usageError{fmt.Errorf("--out-limit is empty; give a size such as 64MiB, or leave the flag out for the default")}
	}
	w := f.wire()
	out, err := w.ParseOutput()
	if err != nil {
		return asFlag(err)
	}
	out.Artifacts, out.Quarantine = f.dest, f.quarantine
	*o = out
	return nil
}

// liveWriter escapes control sequences when w is a terminal (every byte
// above 0x7F too when the locale is not UTF-8).
func liveWriter(w io.Writer) io.Writer {
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		return termsafe.ForLocale(w, os.Getenv)
	}
	return w
}

func flush(w io.Writer) {
	if t, ok := w.(*termsafe.Writer); ok {
		t.Flush()
	}
}

// ending says, for a person, why a run that did not simply exit ended.
func ending(r runner.Result) string {
	switch r.Reason {
	case runner.ReasonTimeout:
		return fmt.Sprintf("run %s killed at its %dms timeout (reason timeout)", r.ID, r.Limits.TimeoutMS)
	case runner.ReasonOOM:
		return fmt.Sprintf("run %s killed at its %s memory limit (reason oom)", r.ID, units.Bytes(r.Limits.MemoryBytes))
	case runner.ReasonOutputLimit:
		return fmt.Sprintf("run %s killed: output passed its %s cap (stdout %d bytes, stderr %d bytes; reason output_limit; --json keeps the head and tail)",
			r.ID, units.Bytes(r.Limits.OutputBytes), r.Stdout.Bytes, r.Stderr.Bytes)
	case runner.ReasonKilled:
		return fmt.Sprintf("run %s killed: airlock was interrupted (reason killed)", r.ID)
	case runner.ReasonDestroyed:
		return fmt.Sprintf("run %s destroyed by another airlock process: `airlock kill`, or `airlock reap` after its deadline (reason destroyed)", r.ID)
	}
	return ""
}

// errorKind names an error's class for JSON consumers.
func errorKind(err error) string {
	if exitCode(err) == exitUsage {
		return "invalid_input"
	}
	return runner.ErrorKind(err)
}

// openStdin opens --stdin: "" for none, "-" for airlock's own standard
// input (as every Unix tool), or a file. A directory is refused before
// anything is created.
func openStdin(cmd *cobra.Command, path string) (io.Reader, func(), error) {
	switch path {
	case "":
		return nil, func() {}, nil
	case "-":
		return cmd.InOrStdin(), func() {}, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: --stdin: %v", errdefs.ErrNotFound, err)
	}
	if fi, err := f.Stat(); err == nil && fi.IsDir() {
		f.Close()
		return nil, nil, usageError{fmt.Errorf("--stdin %q is a directory: give a file, or - for airlock's own standard input", path)}
	}
	return f, func() { f.Close() }, nil
}
