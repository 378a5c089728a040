package isolation

import (
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/docker/docker/api/types/network"
)

// DockerRuntimes maps an isolation mode to the runtime name airlock registers
// with dockerd. The gVisor entry points at airlock's pinned runsc build.
var DockerRuntimes = map[Mode]string{
	GVisor:  "airlock-runsc",
	Seccomp: "runc",
}

// DockerJob is what a run adds to the policy: the program and its labels.
type DockerJob struct {
	// Image is the image ID ("sha256:…"); never a tag.
	Image string
	// Argv is the program and its arguments, run without a shell.
	Argv []string
	// Env holds "K=V" entries given by the caller; the host's environment is
	// never consulted.
	Env    []string
	Labels map[string]string
	// Stdin keeps the program's stdin open for the caller to feed.
	Stdin bool
	// Binds are airlock's scratch directories; Workdir the working directory.
	Binds   []Bind
	Workdir string
	// TmpSource, when set, is the host directory airlock made to be /tmp
	// (see TmpDir): it is bound there in place of the tmpfs. Empty keeps
	// the tmpfs.
	TmpSource string
	// Runtime, when set, is the name dockerd knows the mode's runtime by
	// (a root other than the default registers its runsc under its own);
	// empty means DockerRuntimes' entry for the mode.
	Runtime string
	// CgroupParent is a cgroup airlock created with the same limits. The
	// container's own pids limit is then set one above it, so that the
	// parent, which outlives the container, is the one that records a hit.
	CgroupParent string
}

// Bind is a host path airlock prepared, bound at Target.
type Bind struct {
	Source, Target string
	ReadOnly       bool
}

// DockerNoEgress is why a docker container is never given egress: its
// network would be dockerd's, not a namespace of airlock's with no route
// out.
const DockerNoEgress = "the docker engine gives a sandbox no network at all; use --engine oci"

// DockerOpt mutates a container configuration. Opts run in order after the
// literal default.
type DockerOpt func(*container.Config, *container.HostConfig) error

// DockerConfig converts a policy and a job into the container configuration
// airlock sends to dockerd. It is pure: the same input gives the same output.
func DockerConfig(p Policy, j DockerJob) (*container.Config, *container.HostConfig, *network.NetworkingConfig, error) {
	if err := p.Validate(); err != nil {
		return nil, nil, nil, err
	}
	if len(j.Argv) == 0 || j.Argv[0] == "" {
		return nil, nil, nil, fmt.Errorf("%w: no command given", ErrInvalid)
	}
	if err := refuseEgress(p, DockerNoEgress); err != nil {
		return nil, nil, nil, err
	}
	if j.Workdir != "" {
		if err := CheckWorkdir(j.Workdir); err != nil {
			return nil, nil, nil, err
		}
	}
	cfg, host := dockerDefault()
	for _, opt := range []DockerOpt{
		withDockerRuntime(p.Isolation, j.Runtime),
		withDockerLimits(p.Isolation, p.Limits),
		withDockerTmp(p.Limits, j.TmpSource, j.Binds),
		withDockerIdentity(p),
		withDockerSeccomp(p.Seccomp),
		withDockerJob(j),
		withDockerBinds(j.Binds),
		withDockerCgroupParent(j.CgroupParent),
		withDockerCheck(p, j),
	} {
		if err := opt(cfg, host); err != nil {
			return nil, nil, nil, err
		}
	}
	// No endpoints: the container joins no network at all.
	return cfg, host, &network.NetworkingConfig{}, nil
}

// dockerDefault is the literal starting point: everything shut.
//
// dockerd merges the image's config into a container's wherever the
// container leaves a field empty, so every field it would act on is set
// here: no health check is ever exec'd inside the sandbox, and a stop
// (dockerd's shutdown included) is a SIGKILL. User, Entrypoint, Cmd and
// airlock's labels are set by later steps; an image VOLUME is refused by
// the engine before a container exists, because dockerd would give it a
// writable volume on the host's disk.
func dockerDefault() (*container.Config, *container.HostConfig) {
	cfg := &container.Config{
		NetworkDisabled: true,
		AttachStdout:    true,
		AttachStderr:    true,
		Tty:             false,
		Env:             []string{},
		Labels:          map[string]string{},
		Healthcheck:     &container.HealthConfig{Test: []string{"NONE"}},
		StopSignal:      "SIGKILL",
		Volumes:         nil,
	}
	host := &container.HostConfig{
		NetworkMode:    "none",
		CapDrop:        []string{"ALL"},
		SecurityOpt:    []string{"no-new-privileges"},
		ReadonlyRootfs: true,
		Privileged:     false,
		IpcMode:        "private",
		CgroupnsMode:   "private",
		// Output reaches airlock through attach; a log driver would copy a
		// flood to disk.
		LogConfig:     container.LogConfig{Type: "none"},
		RestartPolicy: container.RestartPolicy{Name: container.RestartPolicyDisabled},
		// Prefer the sandbox when the host runs out of memory.
		OomScoreAdj: 500,
		// The same masked and read-only /proc and /sys paths as the OCI
		// spec; Docker's own defaults leave /proc/cmdline readable.
		MaskedPaths:   maskedPaths(),
		ReadonlyPaths: slices.Clone(ociReadonlyPaths),
		Binds:         nil,
		Mounts:        nil,
		DNS:           []string{},
		ExtraHosts:    nil,
		// An image's EXPOSE reaches nothing: no network, no published port.
		PublishAllPorts: false,
		PortBindings:    nil,
	}
	return cfg, host
}

func withDockerRuntime(m Mode, name string) DockerOpt {
	return func(_ *container.Config, h *container.HostConfig) error {
		rt, err := dockerRuntime(m, name)
		h.Runtime = rt
		return err
	}
}

// dockerRuntime is the runtime a container of mode m runs under: name, or
// the mode's entry in DockerRuntimes.
func dockerRuntime(m Mode, name string) (string, error) {
	rt, ok := DockerRuntimes[m]
	if !ok {
		return "", fmt.Errorf("%w: isolation %q is not available on the docker engine yet; use --isolation %s", ErrInvalid, m, GVisor)
	}
	if name != "" {
		rt = name
	}
	return rt, nil
}

// GVisorHostPids is the host task limit that gives a gVisor sandbox room for
// pids guest tasks. runsc's sentry serves each guest process with host
// tasks of its own (about two under systrap) and keeps a few dozen threads
// besides; gVisor does not enforce RLIMIT_NPROC or an in-sandbox pids limit,
// so the host limit is the one that holds.
func GVisorHostPids(pids int64) int64 { return 2*pids + 64 }

func withDockerLimits(m Mode, l Limits) DockerOpt {
	return func(_ *container.Config, h *container.HostConfig) error {
		pids := l.Pids
		if m == GVisor {
			pids = GVisorHostPids(l.Pids)
		}
		h.Resources = container.Resources{
			Memory:     int64(l.Memory),
			MemorySwap: int64(l.Memory), // equal: no swap on top
			NanoCPUs:   l.CPUs.NanoCPUs(),
			PidsLimit:  &pids,
			Ulimits:    dockerUlimits(l),
		}
		return nil
	}
}

// dockerUlimits are the OCI spec's rlimits as dockerd names them
// ("RLIMIT_NOFILE" is "nofile"), pinned ones included.
func dockerUlimits(l Limits) []*container.Ulimit {
	u := []*container.Ulimit{
		{Name: "nofile", Soft: l.OpenFiles, Hard: l.OpenFiles},
		{Name: "fsize", Soft: int64(l.FileSize), Hard: int64(l.FileSize)},
	}
	for _, r := range pinnedRlimits {
		u = append(u, &container.Ulimit{Name: strings.ToLower(strings.TrimPrefix(r.Type, "RLIMIT_")), Soft: int64(r.Soft), Hard: int64(r.Hard)})
	}
	return u
}

// withDockerTmp mounts /tmp: dockerd's tmpfs capped by l.Tmp, or the
// declared host source (which airlock capped the same way) bound there.
// dockerd's binds take no nosuid or nodev: the bind keeps the flags of the
// source's own mount, which the engine checks has both (a non-recursive
// bind with no other option is never remounted by runc).
func withDockerTmp(l Limits, source string, binds []Bind) DockerOpt {
	return func(_ *container.Config, h *container.HostConfig) error {
		if err := checkTmpSource(source, binds); err != nil {
			return err
		}
		if source == "" {
			h.Tmpfs = map[string]string{TmpDir: dockerTmpfs(l)}
			return nil
		}
		h.Mounts = append(h.Mounts, dockerBind(Bind{Source: source, Target: TmpDir}))
		return nil
	}
}

// dockerTmpfs is the options of the /tmp tmpfs for limits l.
func dockerTmpfs(l Limits) string {
	return "rw,nosuid,nodev,mode=1777,size=" + strconv.FormatInt(int64(l.Tmp), 10) + "," + tmpInodes(int64(l.Tmp))
}

// dockerBind is one of airlock's binds as dockerd takes it: not recursive,
// so nothing mounted beneath the source comes along.
func dockerBind(b Bind) mount.Mount {
	return mount.Mount{
		Type:     mount.TypeBind,
		Source:   b.Source,
		Target:   b.Target,
		ReadOnly: b.ReadOnly,
		BindOptions: &mount.BindOptions{
			Propagation:  mount.PropagationRPrivate,
			NonRecursive: true,
		},
	}
}

func withDockerIdentity(p Policy) DockerOpt {
	return func(c *container.Config, _ *container.HostConfig) error {
		c.User = p.User()
		c.Hostname = p.Hostname
		c.Domainname = ""
		return nil
	}
}

func withDockerJob(j DockerJob) DockerOpt {
	return func(c *container.Config, _ *container.HostConfig) error {
		c.Image = j.Image
		// The argv replaces the image's entrypoint and command entirely.
		c.Entrypoint = []string{j.Argv[0]}
		c.Cmd = append([]string{}, j.Argv[1:]...)
		c.Env = append([]string{}, j.Env...)
		c.Labels = maps.Clone(j.Labels)
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		c.WorkingDir = j.Workdir
		if j.Stdin {
			c.AttachStdin = true
			c.OpenStdin = true
			c.StdinOnce = true
		}
		return nil
	}
}

func withDockerBinds(binds []Bind) DockerOpt {
	return func(_ *container.Config, h *container.HostConfig) error {
		for _, b := range binds {
			if !path.IsAbs(b.Source) || !path.IsAbs(b.Target) || path.Clean(b.Target) != b.Target || b.Target == "/" {
				return fmt.Errorf("%w: bind %q -> %q must join absolute, clean paths", ErrInvalid, b.Source, b.Target)
			}
			if err := CheckTarget(b.Target); err != nil {
				return fmt.Errorf("bind: %w", err)
			}
			h.Mounts = append(h.Mounts, dockerBind(b))
		}
		return nil
	}
}

func withDockerCgroupParent(parent string) DockerOpt {
	return func(_ *container.Config, h *container.HostConfig) error {
		if parent == "" {
			return nil
		}
		if !path.IsAbs(parent) || path.Clean(parent) != parent {
			return fmt.Errorf("%w: cgroup parent %q must be an absolute, clean path", ErrInvalid, parent)
		}
		h.CgroupParent = parent
		pids := *h.PidsLimit + 1
		h.PidsLimit = &pids
		return nil
	}
}

func withDockerSeccomp(prof *SeccompProfile) DockerOpt {
	return func(_ *container.Config, h *container.HostConfig) error {
		if prof == nil {
			return nil
		}
		// dockerd takes the profile's JSON inline; under gVisor runsc
		// applies it because airlock registers runsc with --oci-seccomp.
		h.SecurityOpt = append(h.SecurityOpt, "seccomp="+string(prof.JSON))
		return nil
	}
}
