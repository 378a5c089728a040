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
func withDockerCheck(tmpSource string, binds []Bind) DockerOpt {
	return func(c *container.Config, h *container.HostConfig) error {
		return CheckDockerConfig(c, h, tmpSource, binds...)
	}
}

// CheckDockerConfig reports every way a container configuration is wider
// than DockerConfig ever makes it: a network, a capability, privileges, a
// writable root, root as uid or gid, a shared namespace, a volume, a
// device, a sysctl, a host mount other than binds, a missing limit, a
// raised pinned rlimit, swap, or an unmasked path. binds are the only host
// paths it may mount besides tmpSource, the declared /tmp source ("" for
// none), which only /tmp may bind; /tmp is mounted exactly once. Errors
// wrap ErrInvalid.
func CheckDockerConfig(c *container.Config, h *container.HostConfig, tmpSource string, binds ...Bind) error {
	if c == nil || h == nil {
		return fmt.Errorf("%w: container configuration lacks its config or host config", ErrInvalid)
	}
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
	if !slices.Contains(h.SecurityOpt, "no-new-privileges") {
		bad("no-new-privileges missing")
	}
	for _, o := range h.SecurityOpt {
		if strings.Contains(o, "unconfined") || strings.HasPrefix(o, "label") {
			bad("security option %q", o)
		}
	}
	if !h.ReadonlyRootfs {
		bad("writable root")
	}
	if uid, gid, ok := strings.Cut(c.User, ":"); !ok || !unprivilegedID(uid) || !unprivilegedID(gid) || len(h.GroupAdd) != 0 {
		bad("user %q with groups %v", c.User, h.GroupAdd)
	}
	if h.IpcMode != "private" || h.CgroupnsMode != "private" || h.PidMode != "" || h.UTSMode != "" || h.UsernsMode != "" {
		bad("a shared namespace (ipc %q, cgroup %q, pid %q, uts %q, user %q)", h.IpcMode, h.CgroupnsMode, h.PidMode, h.UTSMode, h.UsernsMode)
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
	for t := range h.Tmpfs {
		if t == TmpDir {
			tmps++
		}
		if t != TmpDir || tmpSource != "" {
			bad("a tmpfs at %q", t)
		}
	}
	if tmps != 1 {
		bad("/tmp is mounted %d times", tmps)
	}
	return errors.Join(errs...)
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
