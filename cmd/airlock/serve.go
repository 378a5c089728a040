package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/admission"
	"github.com/airlock-sandbox/airlock/engines"
	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/kube/cluster"
	"github.com/airlock-sandbox/airlock/mcpserver"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/server"
	"github.com/airlock-sandbox/airlock/service"
	"github.com/airlock-sandbox/airlock/templates"
	"github.com/airlock-sandbox/airlock/units"
)

type serveFlags struct {
	socket, listen, tokenFile, tlsCert, tlsKey, maxBody, maxSpool, addrFile, maxExecBuffer string
	maxSandboxes, maxConnections, maxMCPSessions, maxExecs                                 int
	pools, sandboxPools, runCode                                                           []string
	poolExhausted                                                                          string
	poolMaxAge                                                                             time.Duration
	// The ceilings every face's requests are held to.
	maxMemory, maxOutput, maxEgress, maxWorkspace string
	maxTimeout, maxTTL                            time.Duration
	// The cluster of engine kube's sandbox creates.
	kubeconfig, kubeContext, kubeNamespace string
}

// Defaults of serve's ceilings; --max-memory's is the host's memory.
const (
	defaultMaxOutput    = 1 << 30
	defaultMaxEgress    = 8 << 30
	defaultMaxWorkspace = 16 << 30
	defaultMaxTimeout   = time.Hour
	defaultMaxTTL       = 24 * time.Hour
)

func newServeCmd(g *globals) *cobra.Command {
	f := &serveFlags{}
	cmd := &cobra.Command{
		Use:   "serve [flags]",
		Short: "Serve airlock's HTTP API on a unix socket (and optionally TCP)",
		Long: `Serve every capability of airlock run, sandbox, exec and cp over HTTP:
JSON bodies with the CLI's flag names as fields, live output as NDJSON or
over a WebSocket, file transfers, Prometheus metrics at /metrics, and a
SandboxFusion-compatible POST /run_code. docs/api.md describes the API;
GET /v1/openapi.json serves it as OpenAPI 3.1.

The unix socket (--socket) is mode 0660, owned by root and the group
airlock when it exists; requests on it need no token. --listen adds TCP,
where every request needs "Authorization: Bearer <token>": the token is
read from --token-file, or from <root>/server/token, generated on first
start. A non-loopback --listen is refused without --tls-cert and --tls-key.

Once listening, one line per listener goes to stderr ("airlock serve:
listening on http://127.0.0.1:43567"); --addr-file also writes the TCP
address to a file, for --listen 127.0.0.1:0.

A file or tree downloaded from a sandbox is scanned into a spool file
on airlock's root before its first byte is sent, so that a refusal is
still an error response; it is held until the client has read it.
--max-spool caps what all downloads in progress hold together: past it a
download is refused with 503 unavailable, to be retried.

SIGTERM drains requests in progress. Sandboxes outlive the server: their
supervisors keep enforcing TTL and idle timeouts, and a restarted server
lists them again.

--pool TEMPLATE=N keeps N sandboxes of a template (see airlock template)
created and started, running no user code. A one-shot run that names the
template and fits it (no inputs, the template's limits, at most its
timeout) takes one and gets a fresh sandbox with no cold start. A pooled
sandbox serves one run and is destroyed after it, never reused; each
claim starts a refill. When the pool is empty a run starts cold, or, with
--pool-exhausted fail, is refused with 429 over_limit. Pooled sandboxes
older than --pool-max-age are replaced, and so is the whole pool when its
template changes. They count against --max-sandboxes, show in sandbox ls
as pooled, and are reaped like any other when the server dies.

--max-sandboxes counts the sandboxes and runs of every face (the API,
/run_code and the MCP tools at /mcp) together. --max-memory (which bounds
--tmp-size too: /tmp is memory), --max-output-limit, --max-egress-limit,
--max-workspace-size, --max-timeout and --max-ttl are ceilings on what any
request may ask for, on every face: a run, sandbox or exec asking more is
refused as invalid_input, naming the ceiling.

--pool-sandboxes TEMPLATE=N does the same for sandbox creates: N
long-lived sandboxes of the template, started and idle, each taken by one
create that names the template and fits it (the template's policy, env,
workspace size and output directory); the create's labels, TTL, idle
timeout and download types are given to it as it is taken. Any engine.

--run-code-template python=TEMPLATE serves /run_code's python from a pool
of sandboxes restored from TEMPLATE, a run-code template (airlock template
create TEMPLATE --run-code python --import numpy): each holds a Python
with the template's modules imported, waiting for one job. A request
claims one, its files are written, its code runs as __main__ in a fresh
child of that Python (reseeded), and the sandbox is fetched and destroyed:
one job per sandbox, as without the flag. The pool holds N sandboxes for
--pool-sandboxes TEMPLATE=N, else 2. A request asking more than the
template gives (a run_timeout over its timeout, a memory_limit_MB other
than its memory) starts cold, as without the flag. serve refuses to start
when TEMPLATE does not exist or is no run-code template of this airlock.

--kubeconfig FILE (with --context, --namespace) serves sandboxes on a
Kubernetes cluster too: a sandbox create with "engine": "kube" and a
template alone claims one from the template's SandboxWarmPool there (as
airlock sandbox create --engine kube does); exec (answered whole, not
streamed), one-file transfers, inspect, list and delete reach it by id.
Everything else about it (trees, pause, the WebSocket) is refused,
saying so. docs/kubernetes.md.

--max-execs caps the execs in progress at once on every face (POST
…/exec, its NDJSON stream, the exec WebSocket and MCP's sandbox_exec),
and one sandbox runs at most 64 of them; past either an exec is refused
with 429 over_limit. A WebSocket exec goes on running when its client
leaves, so that a reconnect resumes it, and counts until it ends.
--max-exec-buffer caps the output all WebSocket execs may hold for their
clients and reconnects. A running WebSocket exec counts its most, 6MiB
(3MiB a stream), from its start, so the default 512MiB admits 85 at once;
an ended one counts what it keeps, until 5 minutes after it ends. A new
WebSocket exec that does not fit drops the kept output of ended execs,
oldest first (a reconnect to one is not found); if it still does not
fit, it is refused with 429 over_limit.

--max-mcp-sessions caps the MCP sessions open at once at /mcp. A session
lives from a client's initialize until the client closes it (DELETE /mcp)
or it has been idle for 30 minutes; past the cap a new one is refused
with 429 over_limit, while requests on open sessions go on. A client that
connects for each task and never closes its sessions fills the cap: make
it close them, or raise the cap.`,
		Example: `  airlock serve
  airlock serve --listen 127.0.0.1:8787
  curl --unix-socket /run/airlock/airlock.sock -d '{"argv":["python3","-c","print(6*7)"]}' http://airlock/v1/runs
  airlock template create py --engine oci && airlock serve --pool py=4
  curl --unix-socket /run/airlock/airlock.sock -d '{"template":"py","argv":["python3","-c","print(6*7)"]}' http://airlock/v1/runs
  airlock template create py-np --run-code python --import numpy && airlock serve --run-code-template python=py-np --pool-sandboxes py-np=4`,
		Args: exactArgs(0, "serve takes flags only"),
		RunE: func(cmd *cobra.Command, _ []string) error { return runServe(cmd, g, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.socket, "socket", server.DefaultSocket, "unix socket to listen on")
	fl.StringVar(&f.listen, "listen", "", "also listen on TCP HOST:PORT (bearer token required; port 0 picks one)")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token (default <root>/server/token, generated on first start)")
	fl.StringVar(&f.tlsCert, "tls-cert", "", "TLS certificate for --listen (required for a non-loopback address)")
	fl.StringVar(&f.tlsKey, "tls-key", "", "TLS key for --listen")
	fl.IntVar(&f.maxSandboxes, "max-sandboxes", server.DefaultMaxSandboxes, "cap on live sandboxes plus one-shot runs in progress (429 over_limit past it)")
	fl.IntVar(&f.maxExecs, "max-execs", service.DefaultMaxExecs, fmt.Sprintf("cap on the execs in progress at once, of every face (429 over_limit past it; one sandbox may run at most %d)", service.DefaultMaxExecsPerSandbox))
	fl.StringVar(&f.maxExecBuffer, "max-exec-buffer", units.Bytes(server.DefaultMaxExecBuffer).String(), "cap on the output all WebSocket execs may hold: each running one counts 6MiB, so 512MiB admits 85 at once (past it ended execs' output is dropped, oldest first, then new WebSocket execs get 429 over_limit)")
	fl.IntVar(&f.maxConnections, "max-connections", server.DefaultMaxConnections, "cap on the connections open at once on each listener (new ones wait past it)")
	fl.IntVar(&f.maxMCPSessions, "max-mcp-sessions", mcpserver.DefaultMaxSessions, "cap on the MCP sessions open at once at /mcp (a new one is refused with 429 over_limit past it; closing one, or its 30m idle timeout, frees its slot)")
	fl.StringVar(&f.maxBody, "max-body", units.Bytes(server.DefaultMaxBody).String(), "cap on JSON request bodies")
	fl.StringVar(&f.maxSpool, "max-spool", units.Bytes(server.DefaultMaxSpool).String(), "cap on the bytes all downloads in progress hold on airlock's root (503 unavailable past it)")
	fl.StringVar(&f.addrFile, "addr-file", "", "write the TCP address here once listening (for --listen 127.0.0.1:0)")
	fl.StringArrayVar(&f.pools, "pool", nil, "keep a warm pool of N sandboxes of a template: TEMPLATE=N (repeatable; oci engine)")
	fl.StringArrayVar(&f.sandboxPools, "pool-sandboxes", nil, "keep a warm pool of N long-lived sandboxes of a template for sandbox creates: TEMPLATE=N (repeatable)")
	fl.StringArrayVar(&f.runCode, "run-code-template", nil, "serve /run_code's code of a language from a pool of a run-code template: LANG=TEMPLATE (repeatable; python)")
	fl.StringVar(&f.poolExhausted, "pool-exhausted", "cold", "when a template's pool is empty: cold (start one) or fail (429 over_limit)")
	fl.DurationVar(&f.poolMaxAge, "pool-max-age", runner.DefaultPoolMaxAge, "replace pooled sandboxes older than this")
	fl.StringVar(&f.maxMemory, "max-memory", units.Bytes(hostMemory()).String(), "ceiling on the memory a run or sandbox may ask for (the host's memory by default)")
	fl.StringVar(&f.maxOutput, "max-output-limit", units.Bytes(defaultMaxOutput).String(), "ceiling on the output limit a run, sandbox or exec may ask for")
	fl.StringVar(&f.maxWorkspace, "max-workspace-size", units.Bytes(defaultMaxWorkspace).String(), "ceiling on the workspace size a sandbox may ask for (reserved on airlock's root's disk)")
	fl.StringVar(&f.maxEgress, "max-egress-limit", units.Bytes(defaultMaxEgress).String(), "ceiling on the egress limit (bytes through the egress proxy) a run or sandbox may ask for, its template's included")
	fl.DurationVar(&f.maxTimeout, "max-timeout", defaultMaxTimeout, "ceiling on the timeout a run, sandbox or exec may ask for")
	fl.DurationVar(&f.maxTTL, "max-ttl", defaultMaxTTL, "ceiling on the TTL a sandbox may ask for")
	fl.StringVar(&f.kubeconfig, "kubeconfig", "", "serve engine kube's sandbox creates (a SandboxClaim on a template's warm pool) on this kubeconfig's cluster")
	fl.StringVar(&f.kubeContext, "context", "", "with --kubeconfig: its context (default its current-context)")
	fl.StringVar(&f.kubeNamespace, "namespace", "", "with --kubeconfig: the warm pools' namespace (default the context's, else default)")
	return cmd
}

func runServe(cmd *cobra.Command, g *globals, f *serveFlags) error {
	maxBody, err := units.ParseBytes(f.maxBody)
	if err != nil || maxBody <= 0 {
		return usageError{fmt.Errorf("--max-body %q: give a positive size such as 16MiB", f.maxBody)}
	}
	maxSpool, err := units.ParseBytes(f.maxSpool)
	if err != nil || maxSpool <= 0 {
		return usageError{fmt.Errorf("--max-spool %q: give a positive size such as 16GiB", f.maxSpool)}
	}
	if f.maxSandboxes <= 0 {
		return usageError{fmt.Errorf("--max-sandboxes %d: give a positive number", f.maxSandboxes)}
	}
	maxExecBuffer, err := units.ParseBytes(f.maxExecBuffer)
	if err != nil || maxExecBuffer <= 0 {
		return usageError{fmt.Errorf("--max-exec-buffer %q: give a positive size such as 512MiB", f.maxExecBuffer)}
	}
	if f.maxExecs <= 0 {
		return usageError{fmt.Errorf("--max-execs %d: give a positive number", f.maxExecs)}
	}
	if f.maxConnections <= 0 {
		return usageError{fmt.Errorf("--max-connections %d: give a positive number", f.maxConnections)}
	}
	if f.maxMCPSessions <= 0 {
		return usageError{fmt.Errorf("--max-mcp-sessions %d: give a positive number", f.maxMCPSessions)}
	}
	pools, err := parsePools(f.pools, false)
	if err != nil {
		return err
	}
	sbPools, err := parsePools(f.sandboxPools, true)
	if err != nil {
		return err
	}
	pools = append(pools, sbPools...)
	runCode, err := parseRunCode(f.runCode)
	if err != nil {
		return err
	}
	if f.poolExhausted != "cold" && f.poolExhausted != "fail" {
		return usageError{fmt.Errorf("--pool-exhausted %q: give cold or fail", f.poolExhausted)}
	}
	ceil, err := f.ceilings()
	if err != nil {
		return err
	}
	if f.poolMaxAge < time.Second {
		return usageError{fmt.Errorf("--pool-max-age %v: give at least 1s", f.poolMaxAge)}
	}
	if (f.tlsCert == "") != (f.tlsKey == "") {
		return usageError{errors.New("give both --tls-cert and --tls-key, or neither")}
	}
	var tlsConf *tls.Config
	if f.tlsCert != "" {
		if f.listen == "" {
			return usageError{errors.New("--tls-cert and --tls-key apply to --listen; give it too")}
		}
		cert, err := tls.LoadX509KeyPair(f.tlsCert, f.tlsKey)
		if err != nil {
			return usageError{fmt.Errorf("loading --tls-cert and --tls-key: %w", err)}
		}
		tlsConf = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	var tcp net.Listener
	if f.listen != "" {
		if tcp, err = server.ListenTCP(f.listen, tlsConf); err != nil {
			return err
		}
		listeners = append(listeners, tcp)
	}
	token := ""
	if f.listen != "" || f.tokenFile != "" {
		if token, err = server.LoadToken(g.root, f.tokenFile); err != nil {
			return err
		}
	}
	kube, err := f.kubeTarget()
	if err != nil {
		return err
	}
	unix, err := server.ListenUnix(f.socket)
	if err != nil {
		return err
	}
	listeners = append(listeners, unix)

	// One service under both the API and MCP: one count of sandboxes and
	// runs, one set of runners (with the ceilings), one set of pools.
	host := g.host(engines.Shared(), engines.WithRunnerOptions(runner.WithCeilings(ceil)))
	defer host.Close()
	opts := []service.Option{service.WithAdmission(admission.New(g.root, f.maxSandboxes)),
		service.WithExecLimits(f.maxExecs, service.DefaultMaxExecsPerSandbox), service.WithLogger(g.serverLogger()),
		service.WithPools(pools, service.PoolOptions{MaxAge: f.poolMaxAge, FailWhenEmpty: f.poolExhausted == "fail"}),
		service.WithRunCodeTemplates(runCode)}
	if kube != nil {
		opts = append(opts, service.WithKube(*kube))
	}
	svc := service.New(g.root, host, opts...)
	srv, err := server.New(server.Options{
		Service: svc, Token: token, MaxBody: int64(maxBody), MaxConnections: f.maxConnections, MaxSpool: int64(maxSpool),
		MaxExecBuffer: int64(maxExecBuffer),
		Sweep:         true,
		// MCP's streamable HTTP, behind the same token.
		Extra: map[string]http.Handler{
			"/mcp": mcpserver.New(svc, mcpserver.WithLogger(g.serverLogger()), mcpserver.WithVersion(version), mcpserver.WithMaxSessions(f.maxMCPSessions)).HTTPHandler(),
		},
		Log: g.serverLogger(),
	})
	if err != nil {
		return err
	}
	stderr := cmd.ErrOrStderr()
	fmt.Fprintf(stderr, "airlock serve: listening on unix:%s\n", f.socket)
	if tcp != nil {
		scheme := "http"
		if tlsConf != nil {
			scheme = "https"
		}
		fmt.Fprintf(stderr, "airlock serve: listening on %s://%s\n", scheme, tcp.Addr())
		if f.addrFile != "" {
			if err := atomicfile.WriteFile(f.addrFile, []byte(tcp.Addr().String()), 0o600); err != nil {
				return fmt.Errorf("writing --addr-file: %w", err)
			}
		}
	}
	err = srv.Serve(cmd.Context(), listeners...)
	listeners = nil
	return err
}

// ceilings converts the ceiling flags.
func (f *serveFlags) ceilings() (runner.Ceilings, error) {
	var c runner.Ceilings
	for _, b := range []struct {
		flag, v string
		dst     *units.Bytes
	}{{"--max-memory", f.maxMemory, &c.Memory}, {"--max-output-limit", f.maxOutput, &c.Output}, {"--max-egress-limit", f.maxEgress, &c.Egress},
		{"--max-workspace-size", f.maxWorkspace, &c.Workspace}} {
		n, err := units.ParseBytes(b.v)
		if err != nil || n <= 0 {
			return c, usageError{fmt.Errorf("%s %q: give a positive size such as 4GiB", b.flag, b.v)}
		}
		*b.dst = n
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--max-timeout", f.maxTimeout}, {"--max-ttl", f.maxTTL}} {
		if d.v < time.Second {
			return c, usageError{fmt.Errorf("%s %v: give at least 1s", d.flag, d.v)}
		}
	}
	c.Timeout, c.TTL = f.maxTimeout, f.maxTTL
	return c, nil
}

// hostMemory is the host's total memory, or 0 (no ceiling) when it cannot
// be read.
func hostMemory() int64 {
	var si syscall.Sysinfo_t
	if syscall.Sysinfo(&si) != nil {
		return 0
	}
	return int64(si.Totalram) * int64(si.Unit)
}

// parsePools parses --pool (or, sandboxes, --pool-sandboxes) TEMPLATE=N
// values.
func parsePools(vals []string, sandboxes bool) ([]service.PoolConfig, error) {
	var out []service.PoolConfig
	for _, v := range vals {
		name, num, ok := strings.Cut(v, "=")
		n, err := strconv.Atoi(num)
		if !ok || name == "" || err != nil || n < 1 || n > 256 {
			flag := "--pool"
			if sandboxes {
				flag = "--pool-sandboxes"
			}
			return nil, usageError{fmt.Errorf("%s %q: give TEMPLATE=N with N from 1 to 256, such as %s py=4", flag, v, flag)}
		}
		out = append(out, service.PoolConfig{Template: name, Size: n, Sandboxes: sandboxes})
	}
	return out, nil
}

// parseRunCode parses --run-code-template LANG=TEMPLATE values; the
// service checks the templates when it starts its pools.
func parseRunCode(vals []string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range vals {
		lang, name, ok := strings.Cut(v, "=")
		if !ok || lang == "" || name == "" {
			return nil, usageError{fmt.Errorf("--run-code-template %q: give LANG=TEMPLATE, such as python=py-np", v)}
		}
		if err := templates.CheckName(name); err != nil {
			return nil, usageError{fmt.Errorf("--run-code-template %q: %w", v, err)}
		}
		if _, dup := out[lang]; dup {
			return nil, usageError{fmt.Errorf("--run-code-template names language %q twice; give one template per language", lang)}
		}
		out[lang] = name
	}
	return out, nil
}

// serverLogger logs warnings and up to stderr, everything with --debug.
func (g *globals) serverLogger() *slog.Logger {
	if g.debug {
		return g.logger()
	}
	return slog.New(slog.NewTextHandler(g.stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// kubeTarget is the cluster --kubeconfig names, read once here so that a
// bad one stops serve at its start; nil without the flag.
func (f *serveFlags) kubeTarget() (*service.KubeTarget, error) {
	if f.kubeconfig == "" {
		if f.kubeContext != "" || f.kubeNamespace != "" {
			return nil, usageError{fmt.Errorf("--context and --namespace apply only with --kubeconfig")}
		}
		return nil, nil
	}
	if _, err := cluster.Load(f.kubeconfig, f.kubeContext); err != nil {
		return nil, usageError{fmt.Errorf("--kubeconfig: %w", err)}
	}
	return &service.KubeTarget{Kubeconfig: f.kubeconfig, Context: f.kubeContext, Namespace: f.kubeNamespace}, nil
}
