package isolation

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// withDockerCheck runs last, so a mistake in any earlier step fails closed.
func withDockerCheck(p Policy, j DockerJob) DockerOpt {
	return func(c *container.Config, h *container.HostConfig) error {
		return CheckDockerConfig(c, h, p, j)
	}
}

// CheckDockerConfig reports every way a container configuration is wider
// than DockerConfig(p, j) ever makes it: a network, a capability,
// privileges, a security option airlock does not set or a seccomp
// profile other than p's, a runtime other than the mode's, a writable
// root, root as uid or gid, a shared namespace or cgroup, a volume, a
// device, a sysctl, an annotation, a host mount other than j's, a /tmp
// other than airlock's, a missing limit, a raised pinned rlimit, swap, the
// OOM killer disabled, an unmasked path, the image's health check, stop
// signal or entrypoint, or a working directory in /proc, /sys or /dev. Of
// j it reads the runtime name and the host paths: the binds and the
// declared /tmp source, which only /tmp may bind; /tmp is mounted exactly
// once. Errors wrap ErrInvalid.
func CheckDockerConfig(c *container.Config, h *container.HostConfig, p Policy, j DockerJob) error {
	if c == nil || h == nil {
		return fmt.Errorf("%w: container configuration lacks its config or host config", ErrInvalid)
	}
	tmpSource, binds := j.TmpSource, j.Binds
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: container configuration widens the policy: "+format, append([]any{ErrInvalid}, args...)...))
	}
	if !c.NetworkDisabled || h.NetworkMode != "none" {
		bad("network mode %q", h.NetworkMode)
	}
	if h.Privileged || len(h.CapAdd) != 0 || !slices.Equal(h.CapDrop, []string{"ALL"}) {
		bad("privileged, or capabilities added or not all dropped")
	}
	checkSecurityOpt(h.SecurityOpt, p.Seccomp, bad)
	if p.Isolation == Seccomp && p.Seccomp == nil {
		bad("seccomp isolation with no seccomp profile")
	}
	if rt, err := dockerRuntime(p.Isolation, j.Runtime); err != nil || h.Runtime != rt {
		bad("runtime %q, not the %s mode's %q", h.Runtime, p.Isolation, rt)
	}
	if hc := c.Healthcheck; hc == nil || !slices.Equal(hc.Test, []string{"NONE"}) {
		bad("the image's health check kept")
	}
	if c.StopSignal != "SIGKILL" {
		bad("stop signal %q, not SIGKILL", c.StopSignal)
	}
	if len(c.Entrypoint) == 0 || c.Entrypoint[0] == "" {
		bad("the image's entrypoint kept")
	}
	if c.WorkingDir != "" {
		if err := CheckWorkdir(c.WorkingDir); err != nil {
			bad("working directory: %v", err)
		}
	}
	if !h.ReadonlyRootfs {
		bad("writable root")
	}
	if uid, gid, ok := strings.Cut(c.User, ":"); !ok || !unprivilegedID(uid) || !unprivilegedID(gid) || len(h.GroupAdd) != 0 {
		bad("user %q with groups %v", c.User, h.GroupAdd)
	}
	if h.IpcMode != "private" || h.CgroupnsMode != "private" || h.PidMode != "" || h.UTSMode != "" || h.UsernsMode != "" || h.Cgroup != "" {
		bad("a shared namespace (ipc %q, cgroup %q, pid %q, uts %q, user %q) or another container's cgroup %q", h.IpcMode, h.CgroupnsMode, h.PidMode, h.UTSMode, h.UsernsMode, h.Cgroup)
	}
	if len(h.Annotations) != 0 {
		bad("annotations, which the runtime reads as configuration")
	}
	if len(h.Binds)+len(h.VolumesFrom)+len(c.Volumes) != 0 || h.VolumeDriver != "" {
		bad("volumes or binds outside Mounts")
	}
	if len(h.Devices)+len(h.DeviceRequests)+len(h.DeviceCgroupRules) != 0 || len(h.Sysctls) != 0 {
		bad("devices or sysctls")
	}
	if h.Memory <= 0 || h.MemorySwap != h.Memory {
		bad("memory limit unset or swap granted")
	}
	if h.PidsLimit == nil || *h.PidsLimit <= 0 || h.NanoCPUs <= 0 {
		bad("pids or cpu limit unset")
	}
	if h.OomKillDisable != nil && *h.OomKillDisable {
		bad("the OOM killer disabled")
	}
	// dockerd names RLIMIT_<NAME> as <name>; -1, unlimited, is the largest.
	var rls []specs.POSIXRlimit
	for _, u := range h.Ulimits {
		if u != nil {
			rls = append(rls, specs.POSIXRlimit{Type: "RLIMIT_" + strings.ToUpper(u.Name), Soft: uint64(u.Soft), Hard: uint64(u.Hard)})
		}
	}
	checkRlimits(rls, bad)
	checkPaths(h.MaskedPaths, h.ReadonlyPaths, bad)
	tmps := 0
	for _, m := range h.Mounts {
		if m.Target == TmpDir {
			tmps++
		}
		if why := checkDockerMount(m, tmpSource, binds); why != "" {
			bad("mount %q: %s", m.Target, why)
		}
	}
	for t, o := range h.Tmpfs {
		if t == TmpDir {
			tmps++
		}
		if t != TmpDir || tmpSource != "" || o != dockerTmpfs(p.Limits) {
			bad("a tmpfs at %q with options %q", t, o)
		}
	}
	if tmps != 1 {
		bad("/tmp is mounted %d times", tmps)
	}
	return errors.Join(errs...)
}

// checkSecurityOpt reports, through bad, a security option airlock does
// not set, no-new-privileges left off, or a seccomp profile other than
// prof's (dockerd's own default for a nil prof). It reads opts as dockerd
// does (moby's parseSecurityOpt): in order, the last of a key winning.
func checkSecurityOpt(opts []string, prof *SeccompProfile, bad func(string, ...any)) {
	nnp, seccomp := false, ""
	for _, o := range opts {
		if o == "no-new-privileges" {
			nnp = true
			continue
		}
		k, v, ok := strings.Cut(o, "=")
		if !ok {
			k, v, ok = strings.Cut(o, ":")
		}
		switch {
		case ok && k == "no-new-privileges":
			b, err := strconv.ParseBool(v)
			if err != nil {
				bad("security option %q", o)
			}
			nnp = b
		case ok && k == "seccomp":
			seccomp = v
		default:
			bad("security option %.40q, which airlock does not set", o)
		}
	}
	if !nnp {
		bad("no-new-privileges missing or undone")
	}
	want := ""
	if prof != nil {
		want = string(prof.JSON)
	}
	if seccomp != want {
		bad("seccomp profile %.40q, not the policy's", seccomp)
	}
}

// checkDockerMount says what is wrong with m, or "".
func checkDockerMount(m mount.Mount, tmpSource string, binds []Bind) string {
	if m.Type != mount.TypeBind {
		return "type " + strconv.Quote(string(m.Type))
	}
	if o := m.BindOptions; o == nil || !o.NonRecursive || o.Propagation != mount.PropagationRPrivate || o.CreateMountpoint {
		return "a recursive, shared or mount-point-creating bind"
	}
	if why := checkBindAt(m.Source, m.Target, tmpSource); why != "" {
		return why
	}
	if m.Target == TmpDir {
		return ""
	}
	for _, b := range binds {
		if m.Source == b.Source && m.Target == b.Target {
			if b.ReadOnly && !m.ReadOnly {
				return "read-only bind made writable"
			}
			return ""
		}
	}
	return "binds " + strconv.Quote(m.Source) + ", which is not one of airlock's binds"
}

// unprivilegedID reports whether s is a numeric id other than root's.
func unprivilegedID(s string) bool {
	n, err := strconv.ParseUint(s, 10, 32)
	return err == nil && n != 0
}
