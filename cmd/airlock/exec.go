package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/wire"
)

type execFlags struct {
	timeout, output, workdir, stdin string
	env                             []string
	detach, json                    bool
}

func newExecCmd(g *globals) *cobra.Command {
	f := &execFlags{}
	cmd := &cobra.Command{
		Use:   "exec [flags] ID -- COMMAND [ARG...]",
		Short: "Run a command in a live sandbox and report how it ended",
		Long: `Run COMMAND, as an argv (never through a shell), in the live sandbox ID
(see airlock sandbox create). Its working directory is the workspace
/home/user unless --workdir says otherwise; what it writes there stays for
the next exec.

Without --json, the output streams live and airlock exits with the
program's exit code, with the same codes as airlock run for its other
endings (124 timeout, 123 output limit, 137 oom…); a program that cannot
start exits 127 when it is not found and 126 otherwise (oci + gVisor).
With --json it prints the same Result object as airlock run --json, plus
sandbox_id, sealed by a signed receipt (airlock receipt verify). A
timed-out exec leaves none of its processes running, and the sandbox
stays usable.

--detach starts a background process (a server, a watcher) that lives
until the sandbox ends; its output is discarded. An exec into a sandbox
that is gone exits 66; an id that is not a sandbox id exits 64.

In a sandbox on Kubernetes (sandbox create --engine kube) the exec goes
through the API server to the pod, as kubectl exec -i does: stdin, live
output and the exit code. The node applies the pod's exec timeout and
output cap; --env, --workdir, --detach, --timeout and --output-limit
cannot travel there and are refused (wrap the command instead: env
NAME=VALUE CMD, sh -c 'cd DIR && CMD').`,
		Example: `  airlock exec sb-0804d69789f28334e665 -- python3 -c 'print(6*7)'
  airlock exec --json --timeout 5s sb-0804d69789f28334e665 -- sh -c 'ls -l'
  airlock exec --detach sb-0804d69789f28334e665 -- python3 -m http.server --bind 127.0.0.1 8000
  cat job.py | airlock exec --stdin - sb-0804d69789f28334e665 -- python3 -`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 2 {
				return usageError{fmt.Errorf("give a sandbox id and a command: airlock exec ID -- COMMAND [ARG...]")}
			}
			if d := cmd.ArgsLenAtDash(); d > 1 {
				return usageError{fmt.Errorf("put only the sandbox id before `--`: airlock exec ID -- COMMAND [ARG...]")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error { return runExec(cmd, g, f, args[0], args[1:]) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.timeout, "timeout", "", "wall-clock limit, from the program's start (default: the sandbox's --timeout)")
	fl.StringVar(&f.output, "output-limit", "", "cap on each of stdout and stderr (default: the sandbox's)")
	fl.StringArrayVarP(&f.env, "env", "e", nil, "set an environment variable NAME=VALUE (repeatable)")
	fl.StringVar(&f.workdir, "workdir", "", "working directory (default /home/user)")
	fl.StringVar(&f.stdin, "stdin", "", "feed this file to the program's stdin; - reads airlock's own stdin")
	fl.BoolVar(&f.detach, "detach", false, "start the command in the background, where it lives until the sandbox ends")
	fl.BoolVar(&f.json, "json", false, "print one JSON result object on stdout instead of streaming output")
	return cmd
}

func runExec(cmd *cobra.Command, g *globals, f *execFlags, id string, argv []string) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	res, err := execOnce(cmd, g, f, id, argv)
	if f.json {
		if err != nil && res.ID == "" {
			res = runner.Result{SandboxID: id, Reason: runner.ReasonError, ExitCode: -1}
		}
		if err != nil {
			res.Error, res.ErrorKind = err.Error(), errorKind(err)
		}
		if encErr := writeJSON(stdout, res); encErr != nil {
			return encErr
		}
		if err != nil {
			sayf(stderr, "%v", err)
		}
		return &exitErr{code: resultCode(res, err)}
	}
	if err != nil {
		return err
	}
	if msg := ending(res); msg != "" {
		sayf(stderr, "exec in sandbox %s: %s", id, msg)
	}
	return &exitErr{code: resultCode(res, nil)}
}

func execOnce(cmd *cobra.Command, g *globals, f *execFlags, id string, argv []string) (runner.Result, error) {
	spec := runner.ExecSpec{Argv: argv, Env: f.env, Workdir: f.workdir, Detach: f.detach}
	var err error
	if f.timeout != "" {
		if spec.Timeout, err = wire.Duration("timeout", f.timeout); err != nil {
			return runner.Result{}, asFlag(err)
		}
	}
	if f.output != "" {
		if spec.OutputLimit, err = wire.Size("output_limit", f.output); err != nil {
			return runner.Result{}, asFlag(err)
		}
	}
	in, closeIn, err := openStdin(cmd, f.stdin)
	if err != nil {
		return runner.Result{}, err
	}
	defer closeIn()
	spec.Stdin = in
	if _, kube, err := g.service("").KubeSandbox(id); kube {
		if err != nil {
			return runner.Result{}, err
		}
		return execKube(cmd, g, f, id, spec)
	}
	r, done, err := g.sandboxRunner(id)
	if err != nil {
		return runner.Result{}, err
	}
	defer done()
	sb, err := r.Open(cmd.Context(), id)
	if err != nil {
		return runner.Result{}, err
	}
	if !f.json {
		out, errw := liveWriter(cmd.OutOrStdout()), liveWriter(cmd.ErrOrStderr())
		spec.Stdout, spec.Stderr = out, errw
		defer flush(out)
		defer flush(errw)
	}
	return sb.Exec(cmd.Context(), spec)
}

// execKube runs spec in a sandbox on a cluster, through its pod's exec.
func execKube(cmd *cobra.Command, g *globals, f *execFlags, id string, spec runner.ExecSpec) (runner.Result, error) {
	if !f.json {
		out, errw := liveWriter(cmd.OutOrStdout()), liveWriter(cmd.ErrOrStderr())
		spec.Stdout, spec.Stderr = out, errw
		defer flush(out)
		defer flush(errw)
	}
	return g.service("").ExecKube(cmd.Context(), id, spec)
}
