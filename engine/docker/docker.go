// Package docker runs airlock jobs through the Docker Engine API.
//
// The container is created from isolation.DockerConfig and nothing else; the
// engine adds only labels. Every container it creates is removed on a
// detached context, whatever happens to the caller's.
package docker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/system"
	"github.com/docker/docker/client"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/realpath"
	"github.com/airlock-sandbox/airlock/isolation"
)

// Labels airlock puts on every container it creates.
const (
	LabelID       = "airlock.id"
	LabelOwner    = "airlock.owner"
	LabelDeadline = "airlock.deadline"
	// LabelRoot names the airlock root that made the container: dockerd
	// is shared by every root on the host, and a root's reap takes only
	// its own.
	LabelRoot = "airlock.root"
	// labelNamespace is airlock's; an image may carry no label in it.
	labelNamespace = "airlock."
)

// cleanupTimeout bounds kill, wait and remove once the run is over.
const cleanupTimeout = 30 * time.Second

// setupTimeout bounds each call that sets a sandbox up: create, attach,
// start. A dockerd that does not answer in time fails the run. 50 gVisor
// containers started at once on a loaded 2-core host took dockerd more
// than 30 s to answer some of them, healthy all along.
const setupTimeout = 60 * time.Second

// Engine is the Docker backend.
type Engine struct {
	cli  *client.Client
	host string
	log  *slog.Logger
	// daemon is what Check last learnt of dockerd; a batch runs Checks
	// and runs concurrently on one Engine.
	daemon atomic.Pointer[daemonFacts]
	// setupTimeout is setupTimeout; tests shorten it.
	setupTimeout time.Duration
	// maxSandboxLog is maxSandboxLog; tests lower it.
	maxSandboxLog int64
	// gvisor is the name dockerd knows this root's runsc by.
	gvisor string
	// root is the airlock root whose containers this engine makes and
	// reaps; "" takes every airlock container as its own.
	root string
	// procs are the pidfds on live sandboxes' processes, one per container.
	procs procWatches
}

// daemonFacts are what a run needs to know of dockerd.
type daemonFacts struct {
	// cgroupfs is set when dockerd uses the cgroupfs driver, so a cgroup
	// path airlock creates can be the container's parent.
	cgroupfs bool
	// sandboxLogs is the --debug-log pattern registered with airlock's
	// runsc ("<root>/sandbox-logs/%ID%/"), or "" when there is none.
	sandboxLogs string
	// noLimits names the limit facts (limitFacts) dockerd's info says
	// are false: it would drop those limits from every container.
	noLimits []string
}

// limits refuses a dockerd that would drop a limit of airlock's policy.
func (f daemonFacts) limits(host string) error {
	if len(f.noLimits) == 0 {
		return nil
	}
	return &limitsError{Host: host, Missing: f.noLimits}
}

// learn keeps what runs need to know from dockerd's info.
func (e *Engine) learn(info system.Info) daemonFacts {
	f := &daemonFacts{
		cgroupfs:    info.CgroupDriver == "cgroupfs",
		sandboxLogs: logPattern(info.Runtimes[e.gvisor].Args),
		noLimits:    missingLimits(info),
	}
	if old := e.daemon.Swap(f); old == nil || old.sandboxLogs != f.sandboxLogs {
		e.privateLogs(f.sandboxLogs)
	}
	return *f
}

// facts returns what was learnt last, asking dockerd only if nothing was
// (the reaper runs no Check).
func (e *Engine) facts(ctx context.Context) (daemonFacts, error) {
	if f := e.daemon.Load(); f != nil {
		return *f, nil
	}
	info, err := e.cli.Info(ctx)
	if err != nil {
		return daemonFacts{}, unavailable(e.cli.DaemonHost(), err)
	}
	return e.learn(info), nil
}

// sandboxLogDir is where container cid's sandbox writes its log, or "".
func (f daemonFacts) sandboxLogDir(cid string) string {
	if f.sandboxLogs == "" {
		return ""
	}
	return strings.ReplaceAll(f.sandboxLogs, "%ID%", cid)
}

// Option configures an Engine.
type Option func(*Engine)

// WithLogger sets the logger; the default discards.
func WithLogger(l *slog.Logger) Option { return func(e *Engine) { e.log = l } }

// WithHost sets the daemon address, such as unix:///run/docker.sock. The
// default follows DOCKER_HOST, then the standard socket.
func WithHost(host string) Option { return func(e *Engine) { e.host = host } }

// WithRuntime sets the name dockerd knows airlock's runsc by, which `airlock
// host install-runtime` chose for the root; the default is
// isolation.DockerRuntimes' gVisor entry.
func WithRuntime(name string) Option { return func(e *Engine) { e.gvisor = name } }

// WithRoot labels the containers the engine makes with airlock's root,
// and confines its leftovers to that root's: another root's runs on the
// same dockerd are not this one's to reap. The root is named as a
// runner's is (realpath.Of), so that every spelling of one root (through
// a symlink, relative) labels and finds the same containers.
func WithRoot(root string) Option {
	return func(e *Engine) { e.root = realpath.Of(root) }
}

// New returns an engine. It does not contact the daemon.
func New(opts ...Option) (*Engine, error) {
	e := &Engine{log: slog.New(slog.DiscardHandler), setupTimeout: setupTimeout, maxSandboxLog: maxSandboxLog, gvisor: isolation.DockerRuntimes[isolation.GVisor]}
	for _, o := range opts {
		o(e)
	}
	copts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if e.host != "" {
		copts = append(copts, client.WithHost(e.host))
	}
	cli, err := client.NewClientWithOpts(copts...)
	if err != nil {
		return nil, errdefs.ErrInvalidArgument.WithMessage(fmt.Sprintf("configuring the docker client: %v; check DOCKER_HOST", err))
	}
	e.cli = cli
	return e, nil
}

// Close releases the client.
func (e *Engine) Close() error { return e.cli.Close() }

// Name implements engine.Engine.
func (e *Engine) Name() string { return "docker" }

// Ping checks that dockerd answers.
func (e *Engine) Ping(ctx context.Context) error {
	if _, err := e.cli.Ping(ctx); err != nil {
		return unavailable(e.cli.DaemonHost(), err)
	}
	return nil
}

func unavailable(host string, err error) error {
	return fmt.Errorf("%w: cannot reach dockerd at %s (%v); start it with `make setup`, or check DOCKER_HOST",
		errdefs.ErrUnavailable, host, err)
}

// Check implements engine.Engine: dockerd answers and can apply every
// limit, the isolation mode's runtime is registered, and the image is
// present under exactly its ID.
func (e *Engine) Check(ctx context.Context, j *engine.SandboxSpec) error {
	if j.Policy.Egress.On() {
		return fmt.Errorf("%w: --allow-host and --credential: %s", errdefs.ErrInvalidArgument, isolation.DockerNoEgress)
	}
	if j.Init == nil {
		if _, err := helperBytes(); err != nil {
			return err
		}
	}
	if _, err := e.CheckRuntime(ctx, j.Policy.Isolation); err != nil {
		return err
	}
	img, err := e.inspectImage(ctx, j.Image.String())
	if err != nil {
		return err
	}
	if img.Config == nil {
		return nil
	}
	// Without a workdir of the spec's, dockerd starts the container and
	// its execs in the image's.
	wd := ""
	if j.Workdir == "" {
		wd = img.Config.WorkingDir
	}
	return checkImageConfig(j.Image.String(), img.Config.Volumes, img.Config.Labels, wd)
}

// CheckRuntime checks that dockerd answers, says it can apply every limit
// of airlock's policy (limitFacts), and has the isolation mode's runtime
// registered as airlock needs it (present and, for runsc, with every flag
// of airlock's policy and the sandbox log); it returns a line describing
// what it found. dockerd may be on another host, so the runtime's path is
// dockerd's to check.
func (e *Engine) CheckRuntime(ctx context.Context, m isolation.Mode) (string, error) {
	rt, ok := e.runtimeName(m)
	if !ok {
		return "", fmt.Errorf("%w: isolation %q is not available on the docker engine yet; use --isolation %s",
			errdefs.ErrInvalidArgument, m, isolation.GVisor)
	}
	info, err := e.cli.Info(ctx)
	if err != nil {
		return "", unavailable(e.cli.DaemonHost(), err)
	}
	if err := e.learn(info).limits(e.cli.DaemonHost()); err != nil {
		return "", err
	}
	ver := fmt.Sprintf("dockerd %s (API %s)", info.ServerVersion, e.cli.ClientVersion())
	r, ok := info.Runtimes[rt]
	if !ok {
		return "", fmt.Errorf("%w: %s has no runtime %q, so it cannot run %s isolation; register airlock's runsc with `make setup` (or `airlock host install-runtime`) and retry",
			errdefs.ErrUnavailable, ver, rt, m)
	}
	if m == isolation.GVisor {
		if missing := MissingRunscArgs(r.Args); len(missing) > 0 {
			// runsc ignores the spec's seccomp profile without --oci-seccomp:
			// running anyway would silently drop a layer.
			return "", fmt.Errorf("%w: %s: runtime %q lacks %s, so it would not apply airlock's policy in full; re-register it with `make setup` (or `airlock host install-runtime`), then SIGHUP dockerd",
				errdefs.ErrUnavailable, ver, rt, strings.Join(missing, " and "))
		}
		if logPattern(r.Args) == "" {
			return "", noSandboxLogs(rt)
		}
	}
	return fmt.Sprintf("%s; runtime %q registered with %s", ver, rt, strings.Join(r.Args, " ")), nil
}

func (e *Engine) checkImage(ctx context.Context, id string) error {
	_, err := e.inspectImage(ctx, id)
	return err
}

func (e *Engine) inspectImage(ctx context.Context, id string) (image.InspectResponse, error) {
	img, err := e.cli.ImageInspect(ctx, id)
	if errdefs.IsNotFound(err) {
		return img, fmt.Errorf("%w: image %s is not in dockerd; airlock never pulls, so import it first with `airlock image import PATH` (`airlock image ls` lists what is present)",
			errdefs.ErrNotFound, id)
	}
	if err != nil {
		return img, unavailable(e.cli.DaemonHost(), err)
	}
	if img.ID != id {
		return img, fmt.Errorf("%w: dockerd resolved %s to image %s; refusing to run anything but the pinned ID", errdefs.ErrNotFound, id, img.ID)
	}
	return img, nil
}

// checkImageConfig refuses what dockerd would act on in an image's config
// that the container's own config cannot override. The image ID is the
// config's digest, so what is checked here is what dockerd merges.
//   - VOLUME: dockerd creates a writable volume on the host's disk for each
//     path, outside the tmpfs and output caps, and keeps it after the run.
//   - Labels in airlock's namespace: reserved for what airlock sets, which
//     the reaper and `airlock ps` read.
//   - WORKDIR (workdir; "" when the spec gives its own): refused where
//     isolation.CheckWorkdir refuses a spec's, as the oci engine does.
func checkImageConfig(id string, volumes map[string]struct{}, labels map[string]string, workdir string) error {
	if workdir != "" {
		if err := isolation.CheckWorkdir(workdir); err != nil {
			return fmt.Errorf("%w: image %s sets WORKDIR %q, which airlock refuses (%v): give the program a working directory (--workdir), or rebuild the image with another WORKDIR",
				errdefs.ErrInvalidArgument, id, workdir, err)
		}
	}
	if len(volumes) > 0 {
		paths := slices.Sorted(maps.Keys(volumes))
		return fmt.Errorf("%w: image %s declares VOLUME %s; dockerd would back each with a writable volume on the host's disk, outside airlock's limits, so airlock refuses it: rebuild the image without VOLUME (the oci engine ignores VOLUME, and keeps those paths read-only)",
			errdefs.ErrInvalidArgument, id, strings.Join(paths, " "))
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if strings.HasPrefix(k, labelNamespace) {
			return fmt.Errorf("%w: image %s carries label %q in airlock's own namespace %q; rebuild the image without it",
				errdefs.ErrInvalidArgument, id, k, labelNamespace)
		}
	}
	return nil
}

// MissingRunscArgs lists the runsc flags airlock's policy depends on
// (isolation.RunscFlags) that a registered runtime lacks.
func MissingRunscArgs(args []string) []string { return isolation.MissingRunscFlags(args) }

// logPattern finds the per-sandbox --debug-log pattern among runsc's
// registered arguments.
func logPattern(args []string) string {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--debug-log="); ok && strings.Contains(v, "%ID%") {
			return v
		}
	}
	return ""
}

// HasImage reports whether dockerd holds the image with exactly this ID.
func (e *Engine) HasImage(ctx context.Context, id string) (bool, error) {
	err := e.checkImage(ctx, id)
	if errdefs.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// statsLost is the error for a run whose cgroup could not be read: without
// its counters a pids-limit hit or an OOM kill would pass for the program's
// own exit.
func statsLost(err error) error {
	return fmt.Errorf("%w: %v; without the run's cgroup counters airlock cannot tell an OOM kill or the pids limit from the program's own exit", errdefs.ErrInternal, err)
}

// within returns call's answer, or false once d has passed; an answer that
// comes later goes to late.
func within[T any](d time.Duration, call func() T, late func(T)) (T, bool) {
	ch := make(chan T, 1)
	go func() { ch <- call() }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case v := <-ch:
		return v, true
	case <-t.C:
		go func() { late(<-ch) }()
		var zero T
		return zero, false
	}
}

// tooSlow says dockerd did not answer a setup call in time.
func (e *Engine) tooSlow(what string) error {
	return fmt.Errorf("%s: %w: dockerd at %s did not answer within %v; check that it is healthy (`docker info`, its log) or restart it with `make setup`",
		what, errdefs.ErrUnavailable, e.cli.DaemonHost(), e.setupTimeout)
}

// noSandboxLogs refuses a gVisor run on a runtime registered without a
// per-sandbox --debug-log: only that log tells a sandbox killed from
// outside from the program's own SIGKILL.
func noSandboxLogs(rt string) error {
	return fmt.Errorf("%w: dockerd's runtime %q has no per-sandbox --debug-log (…/%%ID%%/), so airlock could not tell a sandbox killed from outside from the program's own exit; re-register it with `make setup` (or `airlock host install-runtime`), then SIGHUP dockerd",
		errdefs.ErrUnavailable, rt)
}

// classify maps a daemon error onto airlock's error classes and says what to do.
func classify(what, host string, err error) error {
	switch {
	case client.IsErrConnectionFailed(err):
		return unavailable(host, err)
	case errdefs.IsNotFound(err):
		return fmt.Errorf("%s: %w: %v", what, errdefs.ErrNotFound, err)
	case errdefs.IsInvalidArgument(err):
		return fmt.Errorf("%s: %w: %v", what, errdefs.ErrInvalidArgument, err)
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: %w", what, err)
	}
	return fmt.Errorf("%s: %w: %v; the dockerd log has the details, and `make setup` re-checks the runtime", what, errdefs.ErrInternal, err)
}

// ListSandboxes returns the IDs of containers airlock created, running or not.
func (e *Engine) ListSandboxes(ctx context.Context) ([]string, error) {
	list, err := e.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: e.ours()})
	if err != nil {
		return nil, unavailable(e.cli.DaemonHost(), err)
	}
	ids := make([]string, 0, len(list))
	for _, c := range list {
		if id, ok := ourID(c); ok {
			ids = append(ids, id)
		}
	}
	return ids, nil
}

// ours filters airlock's containers or volumes to this engine's root's.
func (e *Engine) ours() filters.Args {
	f := filters.NewArgs(filters.Arg("label", LabelID))
	if e.root != "" {
		f.Add("label", LabelRoot+"="+e.root)
	}
	return f
}

// ofID filters this root's containers or volumes to those of sandbox id.
func (e *Engine) ofID(id string) filters.Args {
	f := e.ours()
	f.Add("label", LabelID+"="+id)
	return f
}

// containersOf lists this root's containers of sandbox id.
func (e *Engine) containersOf(ctx context.Context, id string) ([]container.Summary, error) {
	list, err := e.cli.ContainerList(ctx, container.ListOptions{All: true, Filters: e.ofID(id)})
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(list, func(c container.Summary) bool {
		got, ok := ourID(c)
		return !ok || got != id
	}), nil
}

// containerName is the name airlock gives sandbox id's container.
func containerName(id string) string { return "airlock-" + id }

// ourID is the sandbox id of an airlock container. Labels alone do not
// make one: dockerd copies an image's LABELs onto the containers of it,
// which airlock may not have made. No image names its container, so the
// name must also be the one airlock gave it.
func ourID(c container.Summary) (string, bool) {
	id := c.Labels[LabelID]
	return id, id != "" && slices.Contains(c.Names, "/"+containerName(id))
}

// labels are the labels of the container of s.
func (e *Engine) labels(s *engine.SandboxSpec) map[string]string {
	l := map[string]string{LabelID: s.ID, LabelOwner: s.Owner, LabelDeadline: s.Deadline.UTC().Format(time.RFC3339)}
	if e.root != "" {
		l[LabelRoot] = e.root
	}
	return l
}

// Version returns the daemon's version and negotiated API version.
func (e *Engine) Version(ctx context.Context) (string, error) {
	v, err := e.cli.ServerVersion(ctx)
	if err != nil {
		return "", unavailable(e.cli.DaemonHost(), err)
	}
	return v.Version + " (API " + e.cli.ClientVersion() + ")", nil
}

var _ engine.Engine = (*Engine)(nil)

// hostPids is the host task limit for the policy's runtime.
func hostPids(p isolation.Policy) int64 {
	if p.Isolation == isolation.GVisor {
		return isolation.GVisorHostPids(p.Limits.Pids)
	}
	return p.Limits.Pids
}

// Runtime implements engine.Engine: the binary and flags dockerd has
// registered for the mode, and dockerd's own version.
func (e *Engine) Runtime(ctx context.Context, m isolation.Mode) (engine.Runtime, error) {
	name, _ := e.runtimeName(m)
	rt := engine.Runtime{Name: name, Flags: []string{}}
	info, err := e.cli.Info(ctx)
	if err != nil {
		return rt, unavailable(e.cli.DaemonHost(), err)
	}
	path := rt.Name
	if r, ok := info.Runtimes[rt.Name]; ok {
		if r.Path != "" {
			path = r.Path
		}
		rt.Flags = append(rt.Flags, r.Args...)
	}
	v, err := engine.BinaryVersion(ctx, path, "")
	if err != nil {
		return rt, fmt.Errorf("%w: cannot read the version of dockerd's runtime %q: %v; run `make setup`", errdefs.ErrUnavailable, rt.Name, err)
	}
	rt.Version = v + ", via dockerd " + info.ServerVersion
	return rt, nil
}
