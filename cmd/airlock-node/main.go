// Command airlock-node makes this machine a Kubernetes node whose pods
// run as airlock sandboxes. `airlock node` runs it; it is a binary of its
// own so that the Kubernetes client stays out of airlock's.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/airlock-sandbox/airlock/admission"
	"github.com/airlock-sandbox/airlock/engines"
	"github.com/airlock-sandbox/airlock/kube/node"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/seccomp"
	"github.com/airlock-sandbox/airlock/service"
	"github.com/airlock-sandbox/airlock/units"
)

var version = "dev"

type flags struct {
	root, airlock, kubeconfig, name, address, engine string
	tlsCert, tlsKey, clientCA, maxOutput             string
	maxSandboxes, maxExecs, port                     int
	leaseDuration                                    time.Duration
	debug                                            bool
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := newCmd().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock node: %v\n", err)
		if errors.Is(err, errdefs.ErrInvalidArgument) {
			os.Exit(64)
		}
		os.Exit(1)
	}
}

func newCmd() *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "airlock node [--kubeconfig FILE] [--name NAME]",
		Short: "Join a Kubernetes cluster as a node that runs pods as airlock sandboxes",
		Long: `Register this machine as a Kubernetes node and run each pod the scheduler
binds to it as an airlock sandbox: the pod's one container's command runs in
the sandbox for the pod's life, under the policy the pod carries (airlock
kube render writes such pods). The pod's status follows the program, with
airlock's reason word (exited, timeout, oom, output_limit …) in the
container's terminated state; deleting the pod ends the sandbox.

The node is tainted airlock.dev/sandbox=true:NoSchedule, so only pods that
tolerate it come; its capacity is the host's CPUs and memory and
--max-sandboxes pods. It renews a lease in kube-node-lease.

A pod is refused, Failed with a message naming the field, for anything the
node cannot honour: an image not pinned by digest or not held here (the
node never pulls: load images with airlock image import), a volume other than
an emptyDir at /tmp or /home/user (a service-account token among them: set
automountServiceAccountToken: false), host namespaces, privileged, added
capabilities, another user than 65534, probes, ports, restarts, env read
from secrets, a runtime class other than gvisor or runc. A pod whose
output limit is over --max-output-limit fails as it starts, saying so.

The kubeconfig holds the node's credentials and must be mode 0600; give the
node a node's role (docs/kubernetes.md). A restarted node ends the sandboxes
its last process left and fails their pods: a program never runs twice.
Once the node's lease has gone unrenewed for --lease-duration, airlock node
controller (run once per cluster) fails its pods, AirlockNodeLost; a node
that comes back then ends their sandboxes.

With --port, --tls-cert, --tls-key and --client-ca it serves the API
server's kubectl logs and kubectl exec, as a kubelet does on 10250: every
request is authenticated (a client certificate of --client-ca, or a token
the API server vouches for) and authorized by the API server (nodes/proxy).
kubectl exec runs as airlock exec does, under the pod's exec timeout and
output cap, with no terminal. --max-execs caps the kubectl execs in
progress at once, and one pod runs at most 64 of them; past either an exec
is refused.`,
		Example: `  airlock node --kubeconfig /etc/airlock/node.kubeconfig --name lab-07
  airlock node --name lab-07 --address 10.0.0.7 --port 10250 \
    --tls-cert lab-07.crt --tls-key lab-07.key --client-ca cluster-ca.crt
  KUBECONFIG=$HOME/.kube/node airlock node --max-sandboxes 16`,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE:          func(cmd *cobra.Command, _ []string) error { return run(cmd, f) },
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.root, "root", "/var/lib/airlock", "airlock's state directory")
	pf.StringVar(&f.airlock, "airlock", "", "the airlock binary, whose sandbox supervisor runs the pods' sandboxes (default: beside this one)")
	pf.BoolVar(&f.debug, "debug", false, "log every step to stderr")
	pf.StringVar(&f.kubeconfig, "kubeconfig", os.Getenv("KUBECONFIG"), "the kubeconfig, mode 0600 (default $KUBECONFIG)")
	fl := cmd.Flags()
	fl.DurationVar(&f.leaseDuration, "lease-duration", 40*time.Second, "how long each renewal of the node's lease holds; renewed every quarter of it")
	fl.StringVar(&f.name, "name", "", "the Node's name (default: the host name)")
	fl.StringVar(&f.address, "address", "127.0.0.1", "the Node's InternalIP")
	fl.StringVar(&f.engine, "engine", "oci", "engine the pods' sandboxes run on: oci or docker")
	fl.IntVar(&f.maxSandboxes, "max-sandboxes", 8, "the most pods this node runs at once (its pod capacity)")
	fl.IntVar(&f.maxExecs, "max-execs", service.DefaultMaxExecs, fmt.Sprintf("cap on the kubectl execs in progress at once (one pod may run at most %d); past it an exec is refused", service.DefaultMaxExecsPerSandbox))
	fl.StringVar(&f.maxOutput, "max-output-limit", "1GiB", "ceiling on a pod's output limit (its airlock.dev/output-limit): each stream's cap is held in this process's memory and the pod's log on its disk")
	fl.IntVar(&f.port, "port", 0, "serve kubectl logs and exec to the API server on --address:PORT, over TLS (a kubelet's 10250); 0 serves none")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "with --port: the node's serving certificate, for its --address")
	fl.StringVar(&f.tlsKey, "tls-key", "", "with --port: the serving certificate's key")
	fl.StringVar(&f.clientCA, "client-ca", "", "with --port: the CA of the API server's client certificate (its --kubelet-client-certificate)")
	cmd.AddCommand(newControllerCmd(f))
	return cmd
}

func run(cmd *cobra.Command, f *flags) error {
	// The root as the kernel names it, as airlock's own commands do: the
	// sandbox supervisors start in / and the docker engine labels
	// containers with it.
	f.root = runner.ResolveRoot(f.root)
	if f.name == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("%w: the host name: %v: give --name", errdefs.ErrInvalidArgument, err)
		}
		f.name = h
	}
	if net.ParseIP(f.address) == nil {
		return fmt.Errorf("%w: --address %q is not an IP address", errdefs.ErrInvalidArgument, f.address)
	}
	if f.airlock == "" {
		self, err := os.Executable()
		if err != nil {
			return err
		}
		f.airlock = filepath.Join(filepath.Dir(self), "airlock")
	}
	if _, err := os.Stat(f.airlock); err != nil {
		return fmt.Errorf("%w: the airlock binary: %v: give --airlock PATH", errdefs.ErrInvalidArgument, err)
	}
	maxOutput, err := units.ParseBytes(f.maxOutput)
	if err != nil || maxOutput <= 0 {
		return fmt.Errorf("%w: --max-output-limit %q: give a positive size such as 1GiB", errdefs.ErrInvalidArgument, f.maxOutput)
	}
	if f.maxExecs <= 0 {
		return fmt.Errorf("%w: --max-execs %d: give a positive number", errdefs.ErrInvalidArgument, f.maxExecs)
	}
	p, err := seccomp.Load("default")
	if err != nil {
		return err
	}
	log := logger(cmd, f)
	host := engines.New(f.root, engines.Shared(), engines.WithLogger(log), engines.WithRunnerOptions(runner.WithVersion(version),
		runner.WithCeilings(runner.Ceilings{Output: maxOutput, Command: "airlock node"}),
		runner.WithSupervisor(func(id string) []string {
			return []string{f.airlock, "--root", f.root, "sandbox", "supervise", id}
		})))
	defer host.Close()
	svc := newService(f, host, log)
	err = node.Run(cmd.Context(), node.Config{
		Kubeconfig: f.kubeconfig, Name: f.name, Address: f.address, MaxSandboxes: f.maxSandboxes, Root: f.root, Version: version, Log: log,
		Port: f.port, TLSCert: f.tlsCert, TLSKey: f.tlsKey, ClientCA: f.clientCA, LeaseDuration: f.leaseDuration,
		Provider: node.ProviderConfig{Service: svc, Engine: f.engine, Profile: p.SHA256(), Logs: filepath.Join(f.root, "node", f.name, "logs")},
	}, func() {
		fmt.Fprintf(cmd.ErrOrStderr(), "airlock node: %s registered and running pods\n", f.name)
	})
	if err != nil && cmd.Context().Err() == nil {
		return err
	}
	return nil
}

// newService is the node's service: its admission of sandboxes
// (--max-sandboxes) and of the kubectl execs in progress (--max-execs, and
// at most service.DefaultMaxExecsPerSandbox in one pod).
func newService(f *flags, host service.Engines, log *slog.Logger) *service.Service {
	return service.New(f.root, host, service.WithAdmission(admission.New(f.root, f.maxSandboxes)),
		service.WithExecLimits(f.maxExecs, service.DefaultMaxExecsPerSandbox), service.WithLogger(log))
}

// logger is the process's log, and the Kubernetes client's: its warnings,
// or all with --debug.
func logger(cmd *cobra.Command, f *flags) *slog.Logger {
	level, klogLevel := slog.LevelInfo, slog.LevelWarn
	if f.debug {
		level, klogLevel = slog.LevelDebug, slog.LevelDebug
	}
	klog.SetSlogLogger(slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: klogLevel})))
	return slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
}
