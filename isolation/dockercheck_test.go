package isolation

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/docker/docker/api/types/container"
)

// The final check reads security options as dockerd does, in order with
// the last of a key winning, and allows only those airlock sets: it
// refuses no-new-privileges undone, airlock's seccomp profile dropped or
// replaced, and any other option (dockerd's writable-cgroups, label
// disable, apparmor).
func TestCheckDockerConfigSecurityOpt(t *testing.T) {
	for _, p := range []Policy{seccompPolicy(), gvisorPolicy()} {
		for name, widen := range map[string]func(opts []string) []string{
			"seccomp dropped": func(o []string) []string {
				return slices.DeleteFunc(o, func(x string) bool { return strings.HasPrefix(x, "seccomp=") })
			},
			"seccomp replaced":        func(o []string) []string { return append(o, "seccomp=unconfined") },
			"seccomp builtin":         func(o []string) []string { return append(o, "seccomp=builtin") },
			"seccomp colon":           func(o []string) []string { return append(o, "seccomp:unconfined") },
			"no-new-privileges=false": func(o []string) []string { return append(o, "no-new-privileges=false") },
			"no-new-privileges:false": func(o []string) []string { return append(o, "no-new-privileges:false") },
			"no-new-privileges=0":     func(o []string) []string { return append(o, "no-new-privileges=0") },
			"no-new-privileges=maybe": func(o []string) []string { return append(o, "no-new-privileges=maybe") },
			"writable-cgroups":        func(o []string) []string { return append(o, "writable-cgroups") },
			"writable-cgroups=true":   func(o []string) []string { return append(o, "writable-cgroups=true") },
			"label disable":           func(o []string) []string { return append(o, "disable") },
			"label":                   func(o []string) []string { return append(o, "label=type:spc_t") },
			"apparmor":                func(o []string) []string { return append(o, "apparmor=unconfined") },
			"apparmor profile":        func(o []string) []string { return append(o, "apparmor=other") },
		} {
			cfg, host, _, err := DockerConfig(p, testJob)
			if err != nil {
				t.Fatal(err)
			}
			host.SecurityOpt = widen(slices.Clone(host.SecurityOpt))
			if err := CheckDockerConfig(cfg, host, p, testJob); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s, %s %q: err = %v, want ErrInvalid", p.Isolation, name, host.SecurityOpt, err)
			}
		}
	}
	// no-new-privileges given again, in any spelling that sets it, is no
	// widening; nor is a policy without a profile given none.
	p := seccompPolicy()
	for _, again := range []string{"no-new-privileges=true", "no-new-privileges:1", "no-new-privileges"} {
		cfg, host, _, err := DockerConfig(p, testJob)
		if err != nil {
			t.Fatal(err)
		}
		host.SecurityOpt = append([]string{"no-new-privileges=false"}, append(host.SecurityOpt, again)...)
		if err := CheckDockerConfig(cfg, host, p, testJob); err != nil {
			t.Errorf("no-new-privileges set last by %q: %v", again, err)
		}
	}
	cfg, host, _, err := DockerConfig(Default(), testJob)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckDockerConfig(cfg, host, Default(), testJob); err != nil {
		t.Errorf("gvisor without a profile: %v", err)
	}
	host.SecurityOpt = append(host.SecurityOpt, "seccomp="+string(testSeccomp.JSON))
	if err := CheckDockerConfig(cfg, host, Default(), testJob); !errors.Is(err, ErrInvalid) {
		t.Errorf("a profile the policy does not give: err = %v, want ErrInvalid", err)
	}
}

// The final check refuses what dockerd would otherwise take from the
// image or its own defaults, and the host settings airlock never sets.
func TestCheckDockerConfigCatchesHostWidening(t *testing.T) {
	for name, widen := range map[string]func(*container.Config, *container.HostConfig){
		"oom killer disabled": func(_ *container.Config, h *container.HostConfig) { h.OomKillDisable = new(true) },
		"another container's cgroup": func(_ *container.Config, h *container.HostConfig) {
			h.Cgroup = "container:0123456789ab"
		},
		"host cgroup namespace": func(_ *container.Config, h *container.HostConfig) { h.CgroupnsMode = "host" },
		"gvisor annotation": func(_ *container.Config, h *container.HostConfig) {
			h.Annotations = map[string]string{"dev.gvisor.flag.network": "host"}
		},
		"/tmp exec, suid, dev, no size": func(_ *container.Config, h *container.HostConfig) {
			h.Tmpfs[TmpDir] = "rw,exec,suid,dev"
		},
		"/tmp larger": func(_ *container.Config, h *container.HostConfig) {
			h.Tmpfs[TmpDir] = strings.Replace(h.Tmpfs[TmpDir], "size=", "size=9", 1)
		},
		"/tmp suid last":            func(_ *container.Config, h *container.HostConfig) { h.Tmpfs[TmpDir] += ",suid" },
		"dockerd's default runtime": func(_ *container.Config, h *container.HostConfig) { h.Runtime = "" },
		"another runtime":           func(_ *container.Config, h *container.HostConfig) { h.Runtime = "runc" },
		"image health check":        func(c *container.Config, _ *container.HostConfig) { c.Healthcheck = nil },
		"a health check": func(c *container.Config, _ *container.HostConfig) {
			c.Healthcheck = &container.HealthConfig{Test: []string{"CMD", "true"}}
		},
		"image stop signal": func(c *container.Config, _ *container.HostConfig) { c.StopSignal = "" },
		"image entrypoint":  func(c *container.Config, _ *container.HostConfig) { c.Entrypoint = nil },
		"empty entrypoint":  func(c *container.Config, _ *container.HostConfig) { c.Entrypoint = []string{""} },
		"relative workdir":  func(c *container.Config, _ *container.HostConfig) { c.WorkingDir = "work" },
		"workdir in /proc":  func(c *container.Config, _ *container.HostConfig) { c.WorkingDir = "/proc/self/fd/7" },
		"workdir in /sys":   func(c *container.Config, _ *container.HostConfig) { c.WorkingDir = "/sys/fs/cgroup" },
		"workdir in /dev":   func(c *container.Config, _ *container.HostConfig) { c.WorkingDir = "/dev/shm" },
		"no-new-privs undone": func(_ *container.Config, h *container.HostConfig) {
			h.SecurityOpt = append(h.SecurityOpt, "no-new-privileges=false")
		},
	} {
		// A gVisor policy runs under airlock's runsc, never dockerd's
		// default runc.
		p := gvisorPolicy()
		cfg, host, _, err := DockerConfig(p, testJob)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckDockerConfig(cfg, host, p, testJob); err != nil {
			t.Fatalf("%s: valid config refused: %v", name, err)
		}
		widen(cfg, host)
		if err := CheckDockerConfig(cfg, host, p, testJob); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}

// What DockerConfig makes passes its own check in both modes, under the
// mode's runtime or the one the job names, and with the OOM killer left
// on explicitly; under the seccomp mode's runtime, a gVisor policy fails.
func TestCheckDockerConfigRuntime(t *testing.T) {
	for _, p := range []Policy{seccompPolicy(), gvisorPolicy()} {
		for _, rt := range []string{"", "airlock-runsc-mine"} {
			j := testJob
			j.Runtime = rt
			j.Workdir = "/work"
			cfg, host, _, err := DockerConfig(p, j)
			if err != nil {
				t.Fatalf("%s, runtime %q: %v", p.Isolation, rt, err)
			}
			host.OomKillDisable = new(false)
			if err := CheckDockerConfig(cfg, host, p, j); err != nil {
				t.Errorf("%s, runtime %q: valid config refused: %v", p.Isolation, rt, err)
			}
			if err := CheckDockerConfig(cfg, host, p, testJob); rt != "" && !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: runtime %q taken for the default: %v", p.Isolation, rt, err)
			}
		}
	}
	g, s := gvisorPolicy(), seccompPolicy()
	cfg, host, _, err := DockerConfig(s, testJob)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckDockerConfig(cfg, host, g, testJob); !errors.Is(err, ErrInvalid) {
		t.Errorf("a runc container for a gVisor policy: err = %v, want ErrInvalid", err)
	}
}

// gvisorPolicy is the default policy with a seccomp profile, as the
// runner always gives one: under gVisor its second layer.
func gvisorPolicy() Policy {
	p := Default()
	p.Seccomp = testSeccomp
	return p
}
