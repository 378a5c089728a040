package isolation

import (
	"errors"
	"slices"
	"testing"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"
	"github.com/opencontainers/runtime-spec/specs-go"
)

// A long-lived sandbox's areas, as the runner lays them out.
const testTmpSource = "/var/lib/airlock/sandboxes/s1/tmp"

var tmpSourceBinds = []Bind{
	{Source: "/var/lib/airlock/sandboxes/s1/workspace", Target: "/home/user"},
	{Source: "/var/lib/airlock/sandboxes/s1/out", Target: "/out"},
}

func tmpSourceOCIJob() OCIJob {
	j := testOCIJob
	j.Binds = tmpSourceBinds
	j.TmpSource = testTmpSource
	j.Annotations = map[string]string{"airlock.id": "s1"}
	return j
}

func tmpSourceDockerJob() DockerJob {
	j := testJob
	j.Binds = tmpSourceBinds
	j.TmpSource = testTmpSource
	j.Labels = map[string]string{"airlock.id": "s1"}
	return j
}

func TestTmpSourceGolden(t *testing.T) {
	s, err := OCISpec(Default(), tmpSourceOCIJob())
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "oci-tmpsource.json", s)
	cfg, host, net, err := DockerConfig(Default(), tmpSourceDockerJob())
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "docker-tmpsource.json", map[string]any{"config": cfg, "host_config": host, "networking_config": net})
}

// With a source declared, /tmp is its bind and nothing else, nosuid and
// nodev, not recursive; without one it is the runtime's capped tmpfs.
func TestOCITmpInvariants(t *testing.T) {
	s, err := OCISpec(Default(), tmpSourceOCIJob())
	if err != nil {
		t.Fatal(err)
	}
	var at []specs.Mount
	for _, m := range s.Mounts {
		if m.Destination == TmpDir {
			at = append(at, m)
		}
		if m.Source == testTmpSource && m.Destination != TmpDir {
			t.Errorf("the /tmp source is also mounted at %s", m.Destination)
		}
	}
	if len(at) != 1 {
		t.Fatalf("/tmp mounted %d times: %+v", len(at), at)
	}
	m := at[0]
	if m.Type != "bind" || m.Source != testTmpSource || !slices.Contains(m.Options, "nosuid") || !slices.Contains(m.Options, "nodev") ||
		!slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind") || !slices.Contains(m.Options, "rprivate") {
		t.Errorf("/tmp mount %+v; want a private, non-recursive nosuid,nodev bind of %s", m, testTmpSource)
	}

	s, err = OCISpec(Default(), testOCIJob)
	if err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == TmpDir })
	if i < 0 || s.Mounts[i].Type != "tmpfs" || !slices.Contains(s.Mounts[i].Options, "size=67108864") || !slices.Contains(s.Mounts[i].Options, "nr_inodes=4096") || !slices.Contains(s.Mounts[i].Options, "mode=1777") {
		t.Errorf("without a source, /tmp is not the capped tmpfs: %+v", s.Mounts)
	}
}

func TestDockerTmpInvariants(t *testing.T) {
	_, host, _, err := DockerConfig(Default(), tmpSourceDockerJob())
	if err != nil {
		t.Fatal(err)
	}
	if len(host.Tmpfs) != 0 {
		t.Errorf("a tmpfs beside the /tmp source: %v", host.Tmpfs)
	}
	var at []mount.Mount
	for _, m := range host.Mounts {
		if m.Target == TmpDir {
			at = append(at, m)
		}
	}
	if len(at) != 1 || at[0].Type != mount.TypeBind || at[0].Source != testTmpSource || at[0].BindOptions == nil ||
		!at[0].BindOptions.NonRecursive || at[0].BindOptions.Propagation != mount.PropagationRPrivate {
		t.Errorf("/tmp mounts %+v; want one private, non-recursive bind of %s", at, testTmpSource)
	}
	_, host, _, err = DockerConfig(Default(), testJob)
	if err != nil {
		t.Fatal(err)
	}
	if len(host.Mounts) != 0 || host.Tmpfs[TmpDir] != "rw,nosuid,nodev,mode=1777,size=67108864,nr_inodes=4096" {
		t.Errorf("without a source, /tmp is not the capped tmpfs: %v %v", host.Mounts, host.Tmpfs)
	}
}

// A /tmp source is declared only as such: it must be a clean host path,
// not also a bind; and a Bind still cannot reach /tmp or any reserved
// target, with or without one.
func TestTmpSourceRefused(t *testing.T) {
	for name, mutate := range map[string]func(src *string, binds *[]Bind){
		"relative source":      func(src *string, _ *[]Bind) { *src = "tmp" },
		"unclean source":       func(src *string, _ *[]Bind) { *src = "/var/lib/../tmp" },
		"host root":            func(src *string, _ *[]Bind) { *src = "/" },
		"source also bound":    func(src *string, b *[]Bind) { *b = append(*b, Bind{Source: *src, Target: "/data"}) },
		"bind at /tmp":         func(_ *string, b *[]Bind) { *b = append(*b, Bind{Source: "/srv/x", Target: "/tmp"}) },
		"bind beneath /tmp":    func(_ *string, b *[]Bind) { *b = append(*b, Bind{Source: "/srv/x", Target: "/tmp/x"}) },
		"bind at /etc":         func(_ *string, b *[]Bind) { *b = append(*b, Bind{Source: "/srv/x", Target: "/etc"}) },
		"no source, bind /tmp": func(src *string, b *[]Bind) { *src = ""; *b = append(*b, Bind{Source: "/srv/x", Target: "/tmp"}) },
	} {
		oj, dj := tmpSourceOCIJob(), tmpSourceDockerJob()
		binds := slices.Clone(tmpSourceBinds)
		src := testTmpSource
		mutate(&src, &binds)
		oj.TmpSource, oj.Binds = src, binds
		dj.TmpSource, dj.Binds = src, binds
		if s, err := OCISpec(Default(), oj); !errors.Is(err, ErrInvalid) || s != nil {
			t.Errorf("%s: OCISpec err = %v, want ErrInvalid", name, err)
		}
		if _, _, _, err := DockerConfig(Default(), dj); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: DockerConfig err = %v, want ErrInvalid", name, err)
		}
	}
}

// The final check refuses a /tmp that is not exactly the declared source's
// bind, and any bind at a reserved target.
func TestCheckOCISpecTmp(t *testing.T) {
	tmpAt := func(s *specs.Spec) *specs.Mount {
		i := slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == TmpDir })
		return &s.Mounts[i]
	}
	for name, widen := range map[string]func(s *specs.Spec, src *string){
		"undeclared":         func(_ *specs.Spec, src *string) { *src = "" },
		"another source":     func(s *specs.Spec, _ *string) { tmpAt(s).Source = "/var/lib/airlock" },
		"declared elsewhere": func(_ *specs.Spec, src *string) { *src = "/var/lib/airlock/sandboxes/s2/tmp" },
		"suid":               func(s *specs.Spec, _ *string) { tmpAt(s).Options = []string{"bind", "rprivate", "nodev"} },
		"devices":            func(s *specs.Spec, _ *string) { tmpAt(s).Options = []string{"bind", "rprivate", "nosuid"} },
		"recursive": func(s *specs.Spec, _ *string) {
			tmpAt(s).Options = []string{"rbind", "bind", "rprivate", "nosuid", "nodev"}
		},
		"tmpfs over it": func(s *specs.Spec, _ *string) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: TmpDir, Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev"}})
		},
		"bound twice": func(s *specs.Spec, _ *string) { s.Mounts = append(s.Mounts, *tmpAt(s)) },
		"source at /etc": func(s *specs.Spec, src *string) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/etc", Type: "bind", Source: *src, Options: slices.Clone(ociTmpBindOptions)})
		},
		"declared bind at /usr": func(s *specs.Spec, _ *string) {
			s.Mounts[len(s.Mounts)-1].Destination = "/usr"
		},
		"bind at /tmp/x": func(s *specs.Spec, _ *string) {
			b := s.Mounts[len(s.Mounts)-1]
			b.Destination = "/tmp/x"
			s.Mounts = append(s.Mounts, b)
		},
		"bind at /tmp, no source": func(s *specs.Spec, src *string) { *src = ""; tmpAt(s).Source = tmpSourceBinds[1].Source },
	} {
		j := tmpSourceOCIJob()
		s, err := OCISpec(Default(), j)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckOCISpec(s, Default(), j); err != nil {
			t.Fatalf("%s: valid spec refused: %v", name, err)
		}
		widen(s, &j.TmpSource)
		if err := CheckOCISpec(s, Default(), j); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	// A spec with the runtime's tmpfs is no spec for a declared source.
	s, err := OCISpec(Default(), testOCIJob)
	if err != nil {
		t.Fatal(err)
	}
	j := testOCIJob
	j.TmpSource = testTmpSource
	if err := CheckOCISpec(s, Default(), j); !errors.Is(err, ErrInvalid) {
		t.Errorf("tmpfs where a source is declared: err = %v, want ErrInvalid", err)
	}
}

func TestCheckDockerConfigCatchesWidening(t *testing.T) {
	tmpAt := func(h *container.HostConfig) *mount.Mount {
		i := slices.IndexFunc(h.Mounts, func(m mount.Mount) bool { return m.Target == TmpDir })
		return &h.Mounts[i]
	}
	for name, widen := range map[string]func(c *container.Config, h *container.HostConfig, src *string){
		"network":         func(_ *container.Config, h *container.HostConfig, _ *string) { h.NetworkMode = "bridge" },
		"network enabled": func(c *container.Config, _ *container.HostConfig, _ *string) { c.NetworkDisabled = false },
		"privileged":      func(_ *container.Config, h *container.HostConfig, _ *string) { h.Privileged = true },
		"capability":      func(_ *container.Config, h *container.HostConfig, _ *string) { h.CapAdd = []string{"SYS_ADMIN"} },
		"caps kept":       func(_ *container.Config, h *container.HostConfig, _ *string) { h.CapDrop = nil },
		"new privileges":  func(_ *container.Config, h *container.HostConfig, _ *string) { h.SecurityOpt = nil },
		"unconfined": func(_ *container.Config, h *container.HostConfig, _ *string) {
			h.SecurityOpt = append(h.SecurityOpt, "seccomp=unconfined")
		},
		"writable root": func(_ *container.Config, h *container.HostConfig, _ *string) { h.ReadonlyRootfs = false },
		"root user":     func(c *container.Config, _ *container.HostConfig, _ *string) { c.User = "0:65534" },
		"named user":    func(c *container.Config, _ *container.HostConfig, _ *string) { c.User = "root" },
		"extra group":   func(_ *container.Config, h *container.HostConfig, _ *string) { h.GroupAdd = []string{"0"} },
		"host pid":      func(_ *container.Config, h *container.HostConfig, _ *string) { h.PidMode = "host" },
		"host ipc":      func(_ *container.Config, h *container.HostConfig, _ *string) { h.IpcMode = "host" },
		"host userns":   func(_ *container.Config, h *container.HostConfig, _ *string) { h.UsernsMode = "host" },
		"legacy bind":   func(_ *container.Config, h *container.HostConfig, _ *string) { h.Binds = []string{"/:/host"} },
		"volume": func(c *container.Config, _ *container.HostConfig, _ *string) {
			c.Volumes = map[string]struct{}{"/v": {}}
		},
		"device": func(_ *container.Config, h *container.HostConfig, _ *string) {
			h.Devices = []container.DeviceMapping{{}}
		},
		"sysctl":         func(_ *container.Config, h *container.HostConfig, _ *string) { h.Sysctls = map[string]string{"x": "1"} },
		"swap":           func(_ *container.Config, h *container.HostConfig, _ *string) { h.MemorySwap = -1 },
		"no memory":      func(_ *container.Config, h *container.HostConfig, _ *string) { h.Memory, h.MemorySwap = 0, 0 },
		"no pids":        func(_ *container.Config, h *container.HostConfig, _ *string) { h.PidsLimit = nil },
		"unmasked":       func(_ *container.Config, h *container.HostConfig, _ *string) { h.MaskedPaths = nil },
		"writable /proc": func(_ *container.Config, h *container.HostConfig, _ *string) { h.ReadonlyPaths = nil },
		"tmp undeclared": func(_ *container.Config, _ *container.HostConfig, src *string) { *src = "" },
		"tmp elsewhere":  func(_ *container.Config, h *container.HostConfig, _ *string) { tmpAt(h).Source = "/var/lib/airlock" },
		"tmp recursive": func(_ *container.Config, h *container.HostConfig, _ *string) {
			tmpAt(h).BindOptions.NonRecursive = false
		},
		"tmp shared": func(_ *container.Config, h *container.HostConfig, _ *string) {
			tmpAt(h).BindOptions.Propagation = mount.PropagationRShared
		},
		"tmp options unset": func(_ *container.Config, h *container.HostConfig, _ *string) { tmpAt(h).BindOptions = nil },
		"tmpfs beside": func(_ *container.Config, h *container.HostConfig, _ *string) {
			h.Tmpfs = map[string]string{TmpDir: "size=1"}
		},
		"tmpfs elsewhere": func(_ *container.Config, h *container.HostConfig, _ *string) {
			h.Tmpfs = map[string]string{"/etc": "size=1"}
		},
		"tmp bound twice": func(_ *container.Config, h *container.HostConfig, _ *string) { h.Mounts = append(h.Mounts, *tmpAt(h)) },
		"no /tmp": func(_ *container.Config, h *container.HostConfig, _ *string) {
			h.Mounts = slices.DeleteFunc(h.Mounts, func(m mount.Mount) bool { return m.Target == TmpDir })
		},
		"volume mount": func(_ *container.Config, h *container.HostConfig, _ *string) {
			h.Mounts = append(h.Mounts, mount.Mount{Type: mount.TypeVolume, Source: "v", Target: "/v"})
		},
		"foreign bind": func(_ *container.Config, h *container.HostConfig, _ *string) {
			m := *tmpAt(h)
			m.Source, m.Target = "/", "/host"
			h.Mounts = append(h.Mounts, m)
		},
		"source at /etc": func(_ *container.Config, h *container.HostConfig, _ *string) {
			m := *tmpAt(h)
			m.Target = "/etc"
			h.Mounts = append(h.Mounts, m)
		},
		"declared bind at /usr": func(_ *container.Config, h *container.HostConfig, _ *string) {
			h.Mounts[len(h.Mounts)-1].Target = "/usr"
		},
	} {
		j := tmpSourceDockerJob()
		j.Binds = append(slices.Clone(j.Binds), Bind{Source: "/var/lib/airlock/in", Target: "/in", ReadOnly: true})
		cfg, host, _, err := DockerConfig(Default(), j)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckDockerConfig(cfg, host, Default(), j); err != nil {
			t.Fatalf("%s: valid config refused: %v", name, err)
		}
		widen(cfg, host, &j.TmpSource)
		if err := CheckDockerConfig(cfg, host, Default(), j); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	// The read-only input made writable; the default's tmpfs with a source
	// declared.
	j := tmpSourceDockerJob()
	j.Binds = append(slices.Clone(j.Binds), Bind{Source: "/var/lib/airlock/in", Target: "/in", ReadOnly: true})
	cfg, host, _, err := DockerConfig(Default(), j)
	if err != nil {
		t.Fatal(err)
	}
	host.Mounts[len(host.Mounts)-1].ReadOnly = false
	if err := CheckDockerConfig(cfg, host, Default(), j); !errors.Is(err, ErrInvalid) {
		t.Errorf("read-only bind made writable: err = %v", err)
	}
	cfg, host, _, err = DockerConfig(Default(), testJob)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckDockerConfig(cfg, host, Default(), testJob); err != nil {
		t.Errorf("default config refused: %v", err)
	}
	j = testJob
	j.TmpSource = testTmpSource
	if err := CheckDockerConfig(cfg, host, Default(), j); !errors.Is(err, ErrInvalid) {
		t.Errorf("tmpfs where a source is declared: err = %v, want ErrInvalid", err)
	}
}
