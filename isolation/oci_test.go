package isolation

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"
)

var testOCIJob = OCIJob{
	Rootfs:      "/var/lib/airlock/rootfs/sha256-0123456789abcdef",
	Argv:        []string{"python3", "-c", "print(1)"},
	Env:         []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8", "SEED=1"},
	CgroupsPath: "/airlock/r1",
	Annotations: map[string]string{"airlock.id": "r1"},
}

// testSeccomp is a small profile; the real ones are tested where they are
// compiled.
var testSeccomp = &SeccompProfile{
	JSON: []byte(`{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read","write","exit_group"],"action":"SCMP_ACT_ALLOW"}]}`),
	Spec: &specs.LinuxSeccomp{
		DefaultAction: specs.ActErrno,
		Architectures: []specs.Arch{specs.ArchX86_64},
		Syscalls:      []specs.LinuxSyscall{{Names: []string{"read", "write", "exit_group"}, Action: specs.ActAllow}},
	},
	SHA256: "0000000000000000000000000000000000000000000000000000000000000000",
}

var tightOCIBinds = []Bind{
	{Source: "/var/lib/airlock/runs/r2/in", Target: "/work/in", ReadOnly: true},
	{Source: "/var/lib/airlock/runs/r2/out", Target: "/work/out"},
}

func TestOCISpecGolden(t *testing.T) {
	tight := Default()
	tight.Isolation = Seccomp
	tight.Seccomp = testSeccomp
	tight.Limits = Limits{Timeout: 5 * time.Second, Memory: 64 << 20, CPUs: 500, Pids: 32, Output: 4096, Tmp: 8 << 20, FileSize: 8 << 20, OpenFiles: 64}
	tight.UID, tight.GID, tight.Hostname = 1000, 1000, "box"
	tightJob := testOCIJob
	tightJob.Env = []string{"PATH=/usr/bin:/bin", "HOME=/", "SEED=2", "HOME=/work/out"}
	tightJob.Workdir = "/work"
	tightJob.Binds = tightOCIBinds
	tightJob.CgroupsPath = "/airlock/r2"
	tightJob.Annotations = map[string]string{"airlock.id": "r2"}
	for _, tc := range []struct {
		name string
		p    Policy
		j    OCIJob
	}{
		{"oci-default.json", Default(), testOCIJob},
		{"oci-tight.json", tight, tightJob},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := OCISpec(tc.p, tc.j)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, s)
		})
	}
}

// The invariants hold whatever the limits: these are the properties the
// golden files show, checked directly so a careless -update cannot lose them.
func TestOCISpecInvariants(t *testing.T) {
	j := testOCIJob
	j.Binds = tightOCIBinds
	s, err := OCISpec(Default(), j)
	if err != nil {
		t.Fatal(err)
	}
	pr, l, r := s.Process, s.Linux, s.Linux.Resources
	c := pr.Capabilities
	switch {
	case c == nil || c.Bounding == nil || c.Effective == nil || c.Inheritable == nil || c.Permitted == nil || c.Ambient == nil:
		t.Error("a capability set is nil rather than empty")
	case len(c.Bounding)+len(c.Effective)+len(c.Inheritable)+len(c.Permitted)+len(c.Ambient) != 0:
		t.Errorf("capabilities %+v", *c)
	case !pr.NoNewPrivileges || pr.Terminal:
		t.Error("no-new-privileges missing or terminal given")
	case pr.User.UID != Nobody || pr.User.GID != Nobody || len(pr.User.AdditionalGids) != 0:
		t.Errorf("user %+v", pr.User)
	case pr.ApparmorProfile != "" || pr.SelinuxLabel != "":
		t.Error("apparmor or selinux label set")
	case pr.OOMScoreAdj == nil || *pr.OOMScoreAdj != 500:
		t.Error("oom score adj")
	case !s.Root.Readonly || s.Root.Path != j.Rootfs:
		t.Errorf("root %+v", *s.Root)
	case s.Hooks != nil || l.Seccomp != nil || len(l.Sysctl) != 0 || len(l.Devices) != 0:
		t.Error("hooks, seccomp, sysctls or devices present")
	case len(l.UIDMappings) != 0 || slices.ContainsFunc(l.Namespaces, func(ns specs.LinuxNamespace) bool { return ns.Type == specs.UserNamespace }):
		t.Error("user namespace or mappings present")
	case *r.Memory.Limit != int64(Default().Limits.Memory) || *r.Memory.Swap != *r.Memory.Limit:
		t.Error("memory limit missing or swap granted")
	case *r.CPU.Quota != 100000 || *r.CPU.Period != 100000:
		t.Errorf("cpu quota %d period %d", *r.CPU.Quota, *r.CPU.Period)
	case *r.Pids.Limit != GVisorHostPids(Default().Limits.Pids):
		t.Errorf("pids %d", *r.Pids.Limit)
	case !isDenyAll(r.Devices[0]) || len(r.Devices) != 9:
		t.Errorf("device rules %+v", r.Devices)
	case !slices.Contains(l.MaskedPaths, "/proc/cmdline") || !slices.Contains(l.MaskedPaths, "/proc/kcore"):
		t.Errorf("masked paths %v", l.MaskedPaths)
	case l.CgroupsPath != "/airlock/r1" || pr.Cwd != "/":
		t.Errorf("cgroups path %q cwd %q", l.CgroupsPath, pr.Cwd)
	}
	for _, ns := range l.Namespaces {
		if ns.Path != "" {
			t.Errorf("namespace %s joins %q", ns.Type, ns.Path)
		}
	}
	if !slices.ContainsFunc(l.Namespaces, func(ns specs.LinuxNamespace) bool { return ns.Type == specs.NetworkNamespace }) {
		t.Error("no new network namespace")
	}
	var dests, hostSources []string
	for _, m := range s.Mounts {
		dests = append(dests, m.Destination)
		if m.Type == "bind" {
			hostSources = append(hostSources, m.Source)
		}
		if m.Destination == "/sys/fs/cgroup" {
			t.Error("cgroupfs mounted")
		}
	}
	if want := []string{"/proc", "/dev", "/dev/pts", "/dev/shm", "/dev/mqueue", "/sys", "/tmp", "/work/in", "/work/out"}; !slices.Equal(dests, want) {
		t.Errorf("mounts %v, want %v", dests, want)
	}
	if want := []string{tightOCIBinds[0].Source, tightOCIBinds[1].Source}; !slices.Equal(hostSources, want) {
		t.Errorf("host mounts %v, want %v", hostSources, want)
	}
	for i, m := range s.Mounts[7:] {
		if got := slices.Contains(m.Options, "ro"); got != tightOCIBinds[i].ReadOnly {
			t.Errorf("bind %s read-only = %v", m.Destination, got)
		}
	}
	if rl := pr.Rlimits; len(rl) != len(ociRlimits) || !slices.IsSortedFunc(rl, func(a, b specs.POSIXRlimit) int { return strings.Compare(a.Type, b.Type) }) {
		t.Errorf("rlimits %+v", rl)
	}
	if len(s.Annotations) != 1 || s.Annotations["airlock.id"] != "r1" {
		t.Errorf("annotations %v", s.Annotations)
	}
}

// The spec is shared by both modes; only the host pids limit differs.
func TestOCISpecSeccompMode(t *testing.T) {
	p := Default()
	p.Isolation = Seccomp
	if _, err := OCISpec(p, testOCIJob); !errors.Is(err, ErrInvalid) {
		t.Errorf("seccomp mode without a profile: err = %v", err)
	}
	p.Seccomp = testSeccomp
	s, err := OCISpec(p, testOCIJob)
	if err != nil {
		t.Fatal(err)
	}
	if s.Linux.Seccomp == nil || s.Linux.Seccomp == testSeccomp.Spec || len(s.Linux.Seccomp.Syscalls) != 1 {
		t.Errorf("spec seccomp %+v: want a copy of the profile", s.Linux.Seccomp)
	}
	if *s.Linux.Resources.Pids.Limit != p.Limits.Pids {
		t.Errorf("pids %d, want %d", *s.Linux.Resources.Pids.Limit, p.Limits.Pids)
	}
}

func TestOCISpecEnv(t *testing.T) {
	j := testOCIJob
	j.Env = []string{"PATH=/bin", "HOME=/", "A=b=c", "HOME=/tmp", "PATH=/usr/bin"}
	s, err := OCISpec(Default(), j)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"PATH=/usr/bin", "HOME=/tmp", "A=b=c"}; !slices.Equal(s.Process.Env, want) {
		t.Errorf("env %v, want %v", s.Process.Env, want)
	}
}

// The spec shares no memory with the job, and the same input gives the same
// output.
func TestOCISpecPure(t *testing.T) {
	j := testOCIJob
	j.Argv = slices.Clone(j.Argv)
	j.Annotations = map[string]string{"airlock.id": "r1"}
	a, err := OCISpec(Default(), j)
	if err != nil {
		t.Fatal(err)
	}
	j.Argv[0] = "sh"
	j.Annotations["airlock.id"] = "changed"
	b, err := OCISpec(Default(), testOCIJob)
	if err != nil {
		t.Fatal(err)
	}
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Errorf("specs differ:\n%s\n%s", ja, jb)
	}
}

func TestOCISpecRefuses(t *testing.T) {
	for name, mutate := range map[string]func(*Policy, *OCIJob){
		"zero memory":         func(p *Policy, _ *OCIJob) { p.Limits.Memory = 0 },
		"zero pids":           func(p *Policy, _ *OCIJob) { p.Limits.Pids = 0 },
		"root uid":            func(p *Policy, _ *OCIJob) { p.UID = 0 },
		"root gid":            func(p *Policy, _ *OCIJob) { p.GID = 0 },
		"unknown mode":        func(p *Policy, _ *OCIJob) { p.Isolation = "none" },
		"bad hostname":        func(p *Policy, _ *OCIJob) { p.Hostname = "evil host" },
		"no argv":             func(_ *Policy, j *OCIJob) { j.Argv = nil },
		"empty program":       func(_ *Policy, j *OCIJob) { j.Argv = []string{""} },
		"NUL in argv":         func(_ *Policy, j *OCIJob) { j.Argv = []string{"sh", "a\x00b"} },
		"relative rootfs":     func(_ *Policy, j *OCIJob) { j.Rootfs = "rootfs" },
		"unclean rootfs":      func(_ *Policy, j *OCIJob) { j.Rootfs = "/var/lib/../rootfs" },
		"host root as rootfs": func(_ *Policy, j *OCIJob) { j.Rootfs = "/" },
		"terminal":            func(_ *Policy, j *OCIJob) { j.Terminal = true },
		"relative workdir":    func(_ *Policy, j *OCIJob) { j.Workdir = "work" },
		"unclean workdir":     func(_ *Policy, j *OCIJob) { j.Workdir = "/work/../etc" },
		"no cgroups path":     func(_ *Policy, j *OCIJob) { j.CgroupsPath = "" },
		"relative cgroups":    func(_ *Policy, j *OCIJob) { j.CgroupsPath = "airlock/r1" },
		"unclean cgroups":     func(_ *Policy, j *OCIJob) { j.CgroupsPath = "/airlock/../r1" },
		"root cgroup":         func(_ *Policy, j *OCIJob) { j.CgroupsPath = "/" },
		"env without =":       func(_ *Policy, j *OCIJob) { j.Env = []string{"PATH"} },
		"env empty key":       func(_ *Policy, j *OCIJob) { j.Env = []string{"=x"} },
		"gvisor annotation": func(_ *Policy, j *OCIJob) {
			j.Annotations = map[string]string{"dev.gvisor.spec.mount.x.share": "shared"}
		},
		"kubernetes annotation": func(_ *Policy, j *OCIJob) {
			j.Annotations = map[string]string{"io.kubernetes.cri.container-type": "sandbox"}
		},
		"bind over /proc":      func(_ *Policy, j *OCIJob) { j.Binds = []Bind{{Source: "/srv/x", Target: "/proc"}} },
		"bind under /proc":     func(_ *Policy, j *OCIJob) { j.Binds = []Bind{{Source: "/srv/x", Target: "/proc/sys"}} },
		"bind over /sys":       func(_ *Policy, j *OCIJob) { j.Binds = []Bind{{Source: "/srv/x", Target: "/sys/fs/cgroup"}} },
		"bind over /dev":       func(_ *Policy, j *OCIJob) { j.Binds = []Bind{{Source: "/srv/x", Target: "/dev/shm"}} },
		"bind over /tmp":       func(_ *Policy, j *OCIJob) { j.Binds = []Bind{{Source: "/srv/x", Target: "/tmp"}} },
		"bind over root":       func(_ *Policy, j *OCIJob) { j.Binds = []Bind{{Source: "/srv/x", Target: "/"}} },
		"bind relative target": func(_ *Policy, j *OCIJob) { j.Binds = []Bind{{Source: "/srv/x", Target: "out"}} },
		"bind unclean target":  func(_ *Policy, j *OCIJob) { j.Binds = []Bind{{Source: "/srv/x", Target: "/out/../proc"}} },
		"bind relative source": func(_ *Policy, j *OCIJob) { j.Binds = []Bind{{Source: "x", Target: "/out"}} },
		"bind host root":       func(_ *Policy, j *OCIJob) { j.Binds = []Bind{{Source: "/", Target: "/out"}} },
		"bind target twice": func(_ *Policy, j *OCIJob) {
			j.Binds = []Bind{{Source: "/srv/x", Target: "/out"}, {Source: "/srv/y", Target: "/out"}}
		},
	} {
		p, j := Default(), testOCIJob
		mutate(&p, &j)
		if s, err := OCISpec(p, j); !errors.Is(err, ErrInvalid) || s != nil {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}

func TestCheckOCISpecCatchesWidening(t *testing.T) {
	j := testOCIJob
	j.Binds = tightOCIBinds
	for name, widen := range map[string]func(*specs.Spec){
		"bounding capability":   func(s *specs.Spec) { s.Process.Capabilities.Bounding = []string{"CAP_SYS_ADMIN"} },
		"ambient capability":    func(s *specs.Spec) { s.Process.Capabilities.Ambient = []string{"CAP_NET_RAW"} },
		"capabilities unset":    func(s *specs.Spec) { s.Process.Capabilities = nil },
		"new privileges":        func(s *specs.Spec) { s.Process.NoNewPrivileges = false },
		"terminal":              func(s *specs.Spec) { s.Process.Terminal = true },
		"root uid":              func(s *specs.Spec) { s.Process.User.UID = 0 },
		"root gid":              func(s *specs.Spec) { s.Process.User.GID = 0 },
		"extra group":           func(s *specs.Spec) { s.Process.User.AdditionalGids = []uint32{0} },
		"no nofile rlimit":      func(s *specs.Spec) { s.Process.Rlimits = s.Process.Rlimits[:1] },
		"writable root":         func(s *specs.Spec) { s.Root.Readonly = false },
		"host root":             func(s *specs.Spec) { s.Root.Path = "/" },
		"joined namespace":      func(s *specs.Spec) { s.Linux.Namespaces[1].Path = "/proc/1/ns/net" },
		"host network":          func(s *specs.Spec) { s.Linux.Namespaces = slices.Delete(s.Linux.Namespaces, 1, 2) },
		"host pid namespace":    func(s *specs.Spec) { s.Linux.Namespaces = s.Linux.Namespaces[1:] },
		"uid mappings":          func(s *specs.Spec) { s.Linux.UIDMappings = []specs.LinuxIDMapping{{Size: 1}} },
		"device node":           func(s *specs.Spec) { s.Linux.Devices = []specs.LinuxDevice{{Path: "/dev/kmsg", Type: "c"}} },
		"net device":            func(s *specs.Spec) { s.Linux.NetDevices = map[string]specs.LinuxNetDevice{"eth0": {}} },
		"sysctl":                func(s *specs.Spec) { s.Linux.Sysctl = map[string]string{"kernel.x": "1"} },
		"unmasked kcore":        func(s *specs.Spec) { s.Linux.MaskedPaths = s.Linux.MaskedPaths[3:] },
		"writable /proc/sys":    func(s *specs.Spec) { s.Linux.ReadonlyPaths = nil },
		"hook":                  func(s *specs.Spec) { s.Hooks = &specs.Hooks{} },
		"gvisor annotation":     func(s *specs.Spec) { s.Annotations["dev.gvisor.flag.network"] = "host" },
		"kubernetes annotation": func(s *specs.Spec) { s.Annotations["io.kubernetes.cri.sandbox-id"] = "x" },
		"foreign bind": func(s *specs.Spec) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/host", Type: "bind", Source: "/", Options: []string{"rbind"}})
		},
		"bind hidden in a tmpfs": func(s *specs.Spec) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/etc", Type: "tmpfs", Source: "/etc", Options: []string{"bind"}})
		},
		"bind at another target": func(s *specs.Spec) { s.Mounts[7].Destination = "/etc" },
		"read-only bind made rw": func(s *specs.Spec) { s.Mounts[7].Options = []string{"bind", "rprivate"} },
		"cgroupfs": func(s *specs.Spec) {
			s.Mounts = append(s.Mounts, specs.Mount{Destination: "/sys/fs/cgroup", Type: "cgroup2", Source: "cgroup2"})
		},
		"writable sysfs":    func(s *specs.Spec) { s.Mounts[5].Options = []string{"nosuid"} },
		"id-mapped mount":   func(s *specs.Spec) { s.Mounts[8].UIDMappings = []specs.LinuxIDMapping{{Size: 1}} },
		"no memory limit":   func(s *specs.Spec) { s.Linux.Resources.Memory = nil },
		"zero memory limit": func(s *specs.Spec) { *s.Linux.Resources.Memory.Limit, *s.Linux.Resources.Memory.Swap = 0, 0 },
		"swap":              func(s *specs.Spec) { *s.Linux.Resources.Memory.Swap *= 2 },
		"zero pids limit":   func(s *specs.Spec) { *s.Linux.Resources.Pids.Limit = 0 },
		"no pids limit":     func(s *specs.Spec) { s.Linux.Resources.Pids.Limit = nil },
		"no cpu quota":      func(s *specs.Spec) { s.Linux.Resources.CPU.Quota = nil },
		"devices allowed":   func(s *specs.Spec) { s.Linux.Resources.Devices = s.Linux.Resources.Devices[1:] },
		"all devices allowed": func(s *specs.Spec) {
			s.Linux.Resources.Devices = append(s.Linux.Resources.Devices, specs.LinuxDeviceCgroup{Allow: true, Access: "rwm"})
		},
		"block device allowed": func(s *specs.Spec) {
			s.Linux.Resources.Devices = append(s.Linux.Resources.Devices, specs.LinuxDeviceCgroup{Allow: true, Type: "b", Major: new(int64(8)), Access: "rw"})
		},
		"no linux section": func(s *specs.Spec) { s.Linux = nil },
	} {
		s, err := OCISpec(Default(), j)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckOCISpec(s, Default(), j); err != nil {
			t.Fatalf("%s: valid spec refused: %v", name, err)
		}
		widen(s)
		if err := CheckOCISpec(s, Default(), j); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	// Without the job's binds, its bind mounts are foreign.
	s, err := OCISpec(Default(), j)
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckOCISpec(s, Default(), testOCIJob); !errors.Is(err, ErrInvalid) {
		t.Errorf("binds not passed: err = %v, want ErrInvalid", err)
	}
}

// A clone equals its source and shares nothing a caller may change.
func TestCloneSeccomp(t *testing.T) {
	one, two := uint(1), uint(2)
	src := &specs.LinuxSeccomp{
		DefaultAction: specs.ActErrno, DefaultErrnoRet: &one,
		Architectures: []specs.Arch{specs.ArchX86_64}, Flags: []specs.LinuxSeccompFlag{specs.LinuxSeccompFlagLog},
		ListenerPath: "/l", ListenerMetadata: "m",
		Syscalls: []specs.LinuxSyscall{{Names: []string{"read"}, Action: specs.ActAllow, ErrnoRet: &two,
			Args: []specs.LinuxSeccompArg{{Index: 1, Value: 2, ValueTwo: 3, Op: specs.OpEqualTo}}}},
	}
	c := CloneSeccomp(src)
	if !reflect.DeepEqual(c, src) {
		t.Fatalf("clone %+v, want %+v", c, src)
	}
	before, _ := json.Marshal(src)
	*c.DefaultErrnoRet, *c.Syscalls[0].ErrnoRet = 9, 9
	c.Architectures[0], c.Flags[0], c.Syscalls[0].Names[0] = "x", "x", "x"
	c.Syscalls[0].Args[0].Value = 9
	if after, _ := json.Marshal(src); string(after) != string(before) {
		t.Errorf("changing the clone changed the source:\n%s\n%s", before, after)
	}
	if CloneSeccomp(nil) != nil {
		t.Error("CloneSeccomp(nil) != nil")
	}
}

// The final check holds the spec to the policy's seccomp filter (in
// seccomp mode the only syscall barrier) and every writable tmpfs to its
// size and inode caps, nosuid and nodev, reading options as the runtime
// does: in order, the last of a flag and its opposite winning.
func TestCheckOCISpecRequiresSeccompAndTmpfsCaps(t *testing.T) {
	at := func(s *specs.Spec, dst string) *specs.Mount {
		return &s.Mounts[slices.IndexFunc(s.Mounts, func(m specs.Mount) bool { return m.Destination == dst })]
	}
	drop := func(s *specs.Spec, dst string, drop func(string) bool) {
		m := at(s, dst)
		m.Options = slices.DeleteFunc(slices.Clone(m.Options), drop)
	}
	widenings := map[string]func(*specs.Spec){
		"seccomp dropped": func(s *specs.Spec) { s.Linux.Seccomp = nil },
		"seccomp allows all": func(s *specs.Spec) {
			s.Linux.Seccomp.DefaultAction = specs.ActAllow
		},
		"seccomp notifies": func(s *specs.Spec) { s.Linux.Seccomp.ListenerPath = "/run/agent.sock" },
		"/dev uncapped": func(s *specs.Spec) {
			drop(s, "/dev", func(o string) bool { return strings.HasPrefix(o, "size=") })
		},
		"/dev suid": func(s *specs.Spec) { drop(s, "/dev", func(o string) bool { return o == "nosuid" }) },
	}
	for _, dst := range []string{TmpDir, "/dev/shm"} {
		for _, o := range []string{"size=", "nr_inodes=", "nosuid", "nodev"} {
			widenings[dst+" without "+o] = func(s *specs.Spec) {
				drop(s, dst, func(x string) bool { return x == o || strings.HasPrefix(x, o) && strings.HasSuffix(o, "=") })
			}
		}
		widenings[dst+" size=0"] = func(s *specs.Spec) { at(s, dst).Options = append(at(s, dst).Options, "size=0") }
		widenings[dst+" nr_inodes=0"] = func(s *specs.Spec) { at(s, dst).Options = append(at(s, dst).Options, "nr_inodes=0") }
		widenings[dst+" suid after nosuid"] = func(s *specs.Spec) { at(s, dst).Options = append(at(s, dst).Options, "suid") }
		widenings[dst+" dev after nodev"] = func(s *specs.Spec) { at(s, dst).Options = append(at(s, dst).Options, "dev") }
	}
	p := seccompPolicy()
	for name, widen := range widenings {
		s, err := OCISpec(p, testOCIJob)
		if err != nil {
			t.Fatal(err)
		}
		if err := CheckOCISpec(s, p, testOCIJob); err != nil {
			t.Fatalf("%s: valid spec refused: %v", name, err)
		}
		widen(s)
		if err := CheckOCISpec(s, p, testOCIJob); !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
	// A gVisor policy that carries a filter is held to it too; one with
	// none gets none.
	g := Default()
	g.Seccomp = testSeccomp
	s, err := OCISpec(g, testOCIJob)
	if err != nil {
		t.Fatal(err)
	}
	s.Linux.Seccomp = nil
	if err := CheckOCISpec(s, g, testOCIJob); !errors.Is(err, ErrInvalid) {
		t.Errorf("gvisor, seccomp dropped: err = %v, want ErrInvalid", err)
	}
	if err := CheckOCISpec(s, Default(), testOCIJob); err != nil {
		t.Errorf("gvisor without a profile: %v", err)
	}
	// A later rw or exec undoes a bind's ro or noexec.
	j := testOCIJob
	j.Binds = tightOCIBinds
	for _, opt := range []string{"rw", "exec"} {
		s, err := OCISpec(p, j)
		if err != nil {
			t.Fatal(err)
		}
		for i := range s.Mounts {
			if s.Mounts[i].Type == "bind" {
				s.Mounts[i].Options = append(s.Mounts[i].Options, opt)
			}
		}
		if err := CheckOCISpec(s, p, j); !errors.Is(err, ErrInvalid) {
			t.Errorf("binds given %s last: err = %v, want ErrInvalid", opt, err)
		}
	}
}
