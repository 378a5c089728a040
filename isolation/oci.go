package isolation

import (
	"errors"
	"fmt"
	"maps"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// OCIJob is what a run adds to the policy for a runtime-spec bundle.
type OCIJob struct {
	Rootfs      string            // absolute host path of the unpacked, shared image rootfs
	Argv        []string          // program and args, never a shell string
	Env         []string          // "K=V": the image config's Env first, then the caller's (caller wins on duplicate keys)
	Workdir     string            // absolute; "" means "/"
	Binds       []Bind            // airlock's scratch dirs
	CgroupsPath string            // absolute cgroup path airlock created, e.g. "/airlock/<id>"
	Annotations map[string]string // airlock's own labels only
	Terminal    bool              // always false for airlock; kept so that true is refused, not dropped

	// TmpSource, when set, is the host directory airlock made to be /tmp
	// (see TmpDir): it is bound there, nosuid,nodev, in place of the
	// runtime's tmpfs. Empty keeps the tmpfs.
	TmpSource string

	// Hostname, when set, is the sandbox's host name in place of the
	// policy's: a sandbox restored from a snapshot is named its own
	// (RestoredHostname).
	Hostname string

	// BootID, when set, is the host file airlock wrote the sandbox's boot
	// id in (NewBootID), bound read-only at BootIDPath. gVisor only: runc
	// refuses a bind into /proc.
	BootID string

	// Network is the network airlock made for a policy with egress; it
	// must be given for one, and never for a policy without (whose
	// sandbox gets a new network namespace with loopback alone).
	Network *OCINetwork
}

// OCINetwork is a sandbox's way out, for a policy with egress: a network
// namespace airlock made (internal/netns), whose one peer is the
// sandbox's egress proxy.
type OCINetwork struct {
	// NetNS is the namespace's path: the sandbox joins it, the only
	// namespace it joins.
	NetNS string
	// Proxy is the proxy's URL, "http://169.254.0.1:3128": the sandbox's
	// HTTP_PROXY, HTTPS_PROXY, http_proxy and https_proxy, with NO_PROXY
	// and no_proxy empty.
	Proxy string
}

// ProxyEnv are the variables that send the sandbox's HTTP clients to its
// egress proxy at url, every one of them: no_proxy empty, so that no
// name (localhost included) bypasses it.
func ProxyEnv(url string) []string {
	return []string{
		"HTTP_PROXY=" + url, "HTTPS_PROXY=" + url, "http_proxy=" + url, "https_proxy=" + url,
		"NO_PROXY=", "no_proxy=",
	}
}

// OCIOpt mutates a runtime spec. Opts run in order after the literal default.
type OCIOpt func(*specs.Spec) error

// ociVersion is the spec version airlock writes; runsc and runc accept it.
const ociVersion = "1.0.2"

// ociCPUPeriod is the CFS period, in microseconds, the CPU quota is a share of.
const ociCPUPeriod = 100000

// refusedAnnotations are prefixes a runtime reads as configuration: runsc
// takes dev.gvisor.* as settings (mount hints, flag overrides) and
// io.kubernetes.* as sandbox and container wiring.
var refusedAnnotations = []string{"dev.gvisor.", "io.kubernetes."}

// Paths the program must not read (masked) or write (read-only), as in
// runc's and containerd's defaults, plus /proc/cmdline. /proc/interrupts
// and each CPU's thermal_throttle are side channels (GHSA-6fw5-f8r9-fgfm),
// masked by moby since 28: airlock's list replaces dockerd's.
var (
	ociMaskedPaths = []string{
		"/proc/acpi",
		"/proc/asound",
		"/proc/interrupts",
		"/proc/kcore",
		"/proc/keys",
		"/proc/latency_stats",
		"/proc/timer_list",
		"/proc/timer_stats",
		"/proc/sched_debug",
		"/proc/scsi",
		"/sys/firmware",
		"/sys/devices/virtual/powercap",
		"/proc/cmdline",
	}
	ociReadonlyPaths = []string{
		"/proc/bus",
		"/proc/fs",
		"/proc/irq",
		"/proc/sys",
		"/proc/sysrq-trigger",
	}
	// ociNamespaces are all new and empty: none has a Path, and the network
	// namespace has no interface but loopback.
	ociNamespaces = []specs.LinuxNamespaceType{
		specs.PIDNamespace,
		specs.NetworkNamespace,
		specs.IPCNamespace,
		specs.UTSNamespace,
		specs.MountNamespace,
		specs.CgroupNamespace,
	}
	// ociMountTypes are the filesystem types of the fixed mounts; any other
	// non-bind type (cgroup, overlay, a block device) is a widening.
	ociMountTypes = []string{"proc", "tmpfs", "devpts", "mqueue", "sysfs"}
	// ociRlimits must all be set: the policy's two, then pinnedRlimits.
	ociRlimits = []string{"RLIMIT_FSIZE", "RLIMIT_NOFILE", "RLIMIT_CORE", "RLIMIT_MEMLOCK", "RLIMIT_NICE", "RLIMIT_RTPRIO", "RLIMIT_RTTIME"}
	// pinnedRlimits are the same for every policy, so that none is
	// inherited from whatever started the runtime. RTPRIO 0 keeps the
	// program out of SCHED_FIFO and SCHED_RR, which cpu.max does not
	// throttle; NICE 0 lets it lower its priority only. NPROC and
	// SIGPENDING are counted per host uid, which every sandbox shares, so
	// no per-sandbox value of them would hold.
	pinnedRlimits = []specs.POSIXRlimit{
		{Type: "RLIMIT_CORE"},
		{Type: "RLIMIT_MEMLOCK", Hard: memlockLimit, Soft: memlockLimit},
		{Type: "RLIMIT_NICE"},
		{Type: "RLIMIT_RTPRIO"},
		{Type: "RLIMIT_RTTIME"},
	}
)

// memlockLimit is RLIMIT_MEMLOCK in bytes: Linux's default since 5.16, so a
// program that locks a few pages for its keys (gpg, libsodium) works as on
// a stock host. Locked pages still count toward the memory limit.
const memlockLimit = 8 << 20

// OCISpec converts a policy and a job into the runtime spec airlock writes
// to a bundle's config.json for runsc or runc. It is pure: the same input
// gives the same output. Of the image, only Env and the working directory
// reach the spec, through the job; nothing else in an image config can
// widen the policy.
func OCISpec(p Policy, j OCIJob) (*specs.Spec, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	if err := validateOCIJob(j); err != nil {
		return nil, err
	}
	if j.Network == nil {
		if err := refuseEgress(p, "this spec has no network namespace to give it; the sandbox would have none"); err != nil {
			return nil, err
		}
	} else if !p.Egress.On() {
		return nil, fmt.Errorf("%w: a network namespace given for a policy without egress", ErrInvalid)
	}
	if j.BootID != "" && p.Isolation != GVisor {
		return nil, fmt.Errorf("%w: a boot id file is bound only under gVisor (runc refuses a bind into /proc)", ErrInvalid)
	}
	s := ociDefault()
	for _, opt := range []OCIOpt{
		withOCIIdentity(p),
		withOCIHostname(j.Hostname),
		withOCILimits(p.Isolation, p.Limits),
		withOCITmp(p.Limits, j.TmpSource),
		withOCIJob(j),
		withOCINetwork(j.Network),
		withOCIBinds(j.Binds),
		withOCIBootID(j.BootID),
		withOCISeccomp(p.Seccomp),
		withOCICheck(p, j),
	} {
		if err := opt(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// ociDefault is the literal starting point: everything shut, no limits yet
// and no /tmp until its size is known.
func ociDefault() *specs.Spec {
	return &specs.Spec{
		Version: ociVersion,
		Process: &specs.Process{
			Terminal: false,
			User:     specs.User{UID: Nobody, GID: Nobody},
			Env:      []string{},
			Cwd:      "/",
			// Empty, not nil: every set is given, so no runtime fills one in.
			Capabilities: &specs.LinuxCapabilities{
				Bounding:    []string{},
				Effective:   []string{},
				Inheritable: []string{},
				Permitted:   []string{},
				Ambient:     []string{},
			},
			NoNewPrivileges: true,
			// Prefer the sandbox when the host runs out of memory.
			OOMScoreAdj: new(500),
		},
		Root: &specs.Root{Readonly: true},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k", tmpInodes(64 << 20)}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		},
		Hooks:       nil,
		Annotations: map[string]string{},
		Linux: &specs.Linux{
			Namespaces: ociNamespaceList(),
			Resources: &specs.LinuxResources{
				Devices: ociDevices(),
			},
			MaskedPaths:   maskedPaths(),
			ReadonlyPaths: slices.Clone(ociReadonlyPaths),
			// A later change adds the profiles.
			Seccomp: nil,
		},
	}
}

func ociNamespaceList() []specs.LinuxNamespace {
	ns := make([]specs.LinuxNamespace, 0, len(ociNamespaces))
	for _, t := range ociNamespaces {
		ns = append(ns, specs.LinuxNamespace{Type: t})
	}
	return ns
}

// ociDevices denies every device, then allows the usual character devices:
// null, zero, full, random, urandom, tty, ptmx and the pts range.
func ociDevices() []specs.LinuxDeviceCgroup {
	char := func(major int64, minor *int64) specs.LinuxDeviceCgroup {
		return specs.LinuxDeviceCgroup{Allow: true, Type: "c", Major: &major, Minor: minor, Access: "rwm"}
	}
	return []specs.LinuxDeviceCgroup{
		{Allow: false, Access: "rwm"},
		char(1, new(int64(3))),
		char(1, new(int64(5))),
		char(1, new(int64(7))),
		char(1, new(int64(8))),
		char(1, new(int64(9))),
		char(5, new(int64(0))),
		char(5, new(int64(2))),
		char(136, nil),
	}
}

func validateOCIJob(j OCIJob) error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...))
	}
	if len(j.Argv) == 0 || j.Argv[0] == "" {
		bad("no command given")
	}
	for _, a := range j.Argv {
		if strings.ContainsRune(a, 0) {
			bad("argument %q contains a NUL byte", a)
		}
	}
	if !absClean(j.Rootfs) || j.Rootfs == "/" {
		bad("rootfs %q must be an absolute, clean path other than /", j.Rootfs)
	}
	if j.Terminal {
		bad("a terminal is never given to the sandbox")
	}
	if j.Workdir != "" {
		if err := CheckWorkdir(j.Workdir); err != nil {
			errs = append(errs, err)
		}
	}
	if !absClean(j.CgroupsPath) || j.CgroupsPath == "/" {
		bad("cgroups path %q must be an absolute, clean path other than /", j.CgroupsPath)
	}
	if _, err := mergeEnv(j.Env); err != nil {
		errs = append(errs, err)
	}
	if err := checkTmpSource(j.TmpSource, j.Binds); err != nil {
		errs = append(errs, err)
	}
	if j.Hostname != "" && !validHostname(j.Hostname) {
		bad("hostname %q must be 1 to 63 letters, digits or '-'", j.Hostname)
	}
	if b := j.BootID; b != "" {
		if !absClean(b) || b == "/" || b == j.TmpSource || slices.ContainsFunc(j.Binds, func(x Bind) bool { return x.Source == b }) {
			bad("boot id file %q must be an absolute, clean path other than /, and no other mount's source", b)
		}
	}
	if n := j.Network; n != nil {
		if !absClean(n.NetNS) || n.NetNS == "/" {
			bad("network namespace %q must be an absolute, clean path other than /", n.NetNS)
		}
		if !strings.HasPrefix(n.Proxy, "http://") || strings.ContainsAny(n.Proxy, "\x00 \n") {
			bad("egress proxy %q must be an http:// URL", n.Proxy)
		}
	}
	targets := map[string]bool{}
	for _, b := range j.Binds {
		if !absClean(b.Source) || b.Source == "/" || !absClean(b.Target) || b.Target == "/" {
			bad("bind %q -> %q must join absolute, clean paths other than /", b.Source, b.Target)
		}
		if err := CheckTarget(b.Target); err != nil && absClean(b.Target) && b.Target != "/" {
			errs = append(errs, fmt.Errorf("bind: %w", err))
		}
		if targets[b.Target] {
			bad("bind target %q given twice", b.Target)
		}
		targets[b.Target] = true
	}
	for k := range j.Annotations {
		if refusedAnnotation(k) {
			bad("annotation %q is runtime configuration, not a label", k)
		}
	}
	return errors.Join(errs...)
}

func absClean(p string) bool { return path.IsAbs(p) && path.Clean(p) == p }

func refusedAnnotation(k string) bool {
	for _, pre := range refusedAnnotations {
		if strings.HasPrefix(k, pre) {
			return true
		}
	}
	return false
}

// mergeEnv keeps one entry per key: a later entry replaces an earlier one in
// its place, so the caller's value wins over the image's.
func mergeEnv(env []string) ([]string, error) {
	out := make([]string, 0, len(env))
	at := map[string]int{}
	for _, kv := range env {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" || strings.ContainsRune(kv, 0) {
			return nil, fmt.Errorf("%w: environment entry %q must be K=V", ErrInvalid, kv)
		}
		if i, dup := at[k]; dup {
			out[i] = kv
			continue
		}
		at[k] = len(out)
		out = append(out, kv)
	}
	return out, nil
}

func withOCIIdentity(p Policy) OCIOpt {
	return func(s *specs.Spec) error {
		s.Process.User = specs.User{UID: p.UID, GID: p.GID}
		s.Hostname = p.Hostname
		s.Domainname = ""
		return nil
	}
}

func withOCILimits(m Mode, l Limits) OCIOpt {
	return func(s *specs.Spec) error {
		// As with Docker, the pids limit is on the host cgroup, which under
		// gVisor also holds the sentry's own tasks.
		pids := l.Pids
		if m == GVisor {
			pids = GVisorHostPids(l.Pids)
		}
		s.Linux.Resources.Memory = &specs.LinuxMemory{
			Limit: new(int64(l.Memory)),
			Swap:  new(int64(l.Memory)), // memory+swap equal to memory: no swap
		}
		s.Linux.Resources.CPU = &specs.LinuxCPU{
			Quota:  new(int64(l.CPUs) * ociCPUPeriod / 1000),
			Period: new(uint64(ociCPUPeriod)),
		}
		s.Linux.Resources.Pids = &specs.LinuxPids{Limit: &pids}
		s.Process.Rlimits = append([]specs.POSIXRlimit{
			{Type: "RLIMIT_NOFILE", Hard: uint64(l.OpenFiles), Soft: uint64(l.OpenFiles)},
			{Type: "RLIMIT_FSIZE", Hard: uint64(l.FileSize), Soft: uint64(l.FileSize)},
		}, pinnedRlimits...)
		slices.SortFunc(s.Process.Rlimits, func(a, b specs.POSIXRlimit) int { return strings.Compare(a.Type, b.Type) })
		return nil
	}
}

// ociTmpBindOptions are the options of a declared /tmp source's bind: not
// recursive, and nosuid,nodev like the tmpfs it replaces. It stays
// executable, as that tmpfs is.
var ociTmpBindOptions = []string{"bind", "rprivate", "nosuid", "nodev"}

// withOCITmp mounts /tmp: the runtime's tmpfs capped by l.Tmp, or the
// declared host source (which airlock capped the same way) bound there.
func withOCITmp(l Limits, source string) OCIOpt {
	return func(s *specs.Spec) error {
		m := specs.Mount{
			Destination: TmpDir,
			Type:        "tmpfs",
			Source:      "tmpfs",
			Options:     []string{"nosuid", "nodev", "mode=1777", "size=" + strconv.FormatInt(int64(l.Tmp), 10), tmpInodes(int64(l.Tmp))},
		}
		if source != "" {
			m = specs.Mount{Destination: TmpDir, Type: "bind", Source: source, Options: slices.Clone(ociTmpBindOptions)}
		}
		s.Mounts = append(s.Mounts, m)
		return nil
	}
}

func withOCIJob(j OCIJob) OCIOpt {
	return func(s *specs.Spec) error {
		env, err := mergeEnv(j.Env)
		if err != nil {
			return err
		}
		s.Root.Path = j.Rootfs
		s.Process.Args = slices.Clone(j.Argv)
		s.Process.Env = env
		s.Process.Cwd = j.Workdir
		if s.Process.Cwd == "" {
			s.Process.Cwd = "/"
		}
		s.Linux.CgroupsPath = j.CgroupsPath
		s.Annotations = maps.Clone(j.Annotations)
		if s.Annotations == nil {
			s.Annotations = map[string]string{}
		}
		return nil
	}
}

// withOCINetwork makes the sandbox join the network namespace airlock
// made for its egress, and points its HTTP clients at the proxy there. A
// nil n leaves the new, empty namespace of the default.
func withOCINetwork(n *OCINetwork) OCIOpt {
	return func(s *specs.Spec) error {
		if n == nil {
			return nil
		}
		for i := range s.Linux.Namespaces {
			if s.Linux.Namespaces[i].Type == specs.NetworkNamespace {
				s.Linux.Namespaces[i].Path = n.NetNS
			}
		}
		env, err := mergeEnv(append(s.Process.Env, ProxyEnv(n.Proxy)...))
		if err != nil {
			return err
		}
		s.Process.Env = env
		return nil
	}
}

// withOCIBinds mounts airlock's scratch directories. The binds are not
// recursive, as with Docker, so nothing mounted beneath a source comes
// along, "ro" covers the whole bind, and a writable bind is noexec.
func withOCIBinds(binds []Bind) OCIOpt {
	return func(s *specs.Spec) error {
		for _, b := range binds {
			opts := []string{"bind", "rprivate", "nosuid", "nodev"}
			if b.ReadOnly {
				opts = append(opts, "ro")
			} else {
				// The only writable bind is the output directory: what
				// the program writes there is never run.
				opts = append(opts, "noexec")
			}
			s.Mounts = append(s.Mounts, specs.Mount{
				Destination: b.Target,
				Type:        "bind",
				Source:      b.Source,
				Options:     opts,
			})
		}
		return nil
	}
}

// withOCICheck runs last, so a mistake in any earlier step fails closed.
func withOCICheck(p Policy, j OCIJob) OCIOpt {
	return func(s *specs.Spec) error { return CheckOCISpec(s, p, j) }
}

// CheckOCISpec reports every way s is wider than OCISpec(p, j) ever makes
// it: a capability, a shared or missing namespace, root as uid or gid, a
// writable root, a hook, a host mount other than j's, a runtime
// configuration annotation, a missing limit or device rule, a raised
// pinned rlimit, swap, a seccomp filter other than p's (none included), a
// writable tmpfs without its size and inode caps, nosuid and nodev, or a
// working directory in /proc, /sys or /dev. Of j it reads only the host
// paths: the network namespace s joins (none without j.Network), the
// binds, the declared /tmp source, which only /tmp may bind, and the boot
// id file, which only BootIDPath may bind, read-only. Errors wrap
// ErrInvalid.
func CheckOCISpec(s *specs.Spec, p Policy, j OCIJob) error {
	if s == nil || s.Process == nil || s.Root == nil || s.Linux == nil || s.Linux.Resources == nil {
		return fmt.Errorf("%w: spec lacks process, root, linux or resources", ErrInvalid)
	}
	netNS, tmpSource, bootID, binds := "", j.TmpSource, j.BootID, j.Binds
	if j.Network != nil {
		netNS = j.Network.NetNS
	}
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: spec widens the policy: "+format, append([]any{ErrInvalid}, args...)...))
	}
	pr := s.Process
	if pr.Terminal {
		bad("terminal")
	}
	if c := pr.Capabilities; c == nil {
		bad("capabilities unset")
	} else if len(c.Bounding)+len(c.Effective)+len(c.Inheritable)+len(c.Permitted)+len(c.Ambient) != 0 {
		bad("capabilities %+v", *c)
	}
	if !pr.NoNewPrivileges {
		bad("noNewPrivileges is false")
	}
	if pr.User.UID == 0 || pr.User.GID == 0 || len(pr.User.AdditionalGids) != 0 {
		bad("user %d:%d with groups %v", pr.User.UID, pr.User.GID, pr.User.AdditionalGids)
	}
	if err := CheckWorkdir(pr.Cwd); err != nil {
		bad("cwd: %v", err)
	}
	checkRlimits(pr.Rlimits, bad)
	if !s.Root.Readonly || s.Root.Path == "/" {
		bad("root %q is writable or the host's", s.Root.Path)
	}
	l := s.Linux
	for _, ns := range l.Namespaces {
		if ns.Path != "" && (ns.Type != specs.NetworkNamespace || ns.Path != netNS) {
			bad("joins the %s namespace at %q", ns.Type, ns.Path)
		}
	}
	if netNS != "" && !slices.Contains(l.Namespaces, specs.LinuxNamespace{Type: specs.NetworkNamespace, Path: netNS}) {
		bad("does not join the egress network namespace %q", netNS)
	}
	for _, t := range ociNamespaces {
		if !slices.ContainsFunc(l.Namespaces, func(ns specs.LinuxNamespace) bool { return ns.Type == t }) {
			bad("no new %s namespace", t)
		}
	}
	if len(l.UIDMappings)+len(l.GIDMappings) != 0 {
		bad("uid or gid mappings")
	}
	if len(l.Devices) != 0 || len(l.NetDevices) != 0 || len(l.Sysctl) != 0 {
		bad("devices, network devices or sysctls")
	}
	checkPaths(l.MaskedPaths, l.ReadonlyPaths, bad)
	// The policy's filter, exactly: in seccomp mode the only syscall
	// barrier, under gVisor its second layer.
	var want *specs.LinuxSeccomp
	if p.Seccomp != nil {
		want = p.Seccomp.Spec
	}
	switch {
	case want == nil && p.Isolation == Seccomp:
		bad("seccomp isolation with no seccomp profile")
	case l.Seccomp == nil && want != nil:
		bad("no seccomp filter")
	case !reflect.DeepEqual(l.Seccomp, want):
		bad("a seccomp filter other than the policy's")
	}
	tmps, bootIDs := 0, 0
	for _, m := range s.Mounts {
		if m.Destination == TmpDir {
			tmps++
		}
		why := ""
		if m.Destination == BootIDPath {
			bootIDs++
			why = checkBootIDMount(m, bootID)
		} else {
			why = checkOCIMount(m, tmpSource, binds)
		}
		if why != "" {
			bad("mount %q: %s", m.Destination, why)
		}
	}
	if tmpSource != "" && tmps != 1 {
		bad("/tmp is mounted %d times; a declared /tmp source is its one mount", tmps)
	}
	if bootID != "" && bootIDs != 1 {
		bad("the boot id is mounted %d times; a declared boot id file is its one mount", bootIDs)
	}
	if s.Hooks != nil {
		bad("hooks")
	}
	for k := range s.Annotations {
		if refusedAnnotation(k) {
			bad("annotation %q", k)
		}
	}
	r := l.Resources
	if r.Memory == nil || r.Memory.Limit == nil || r.Memory.Swap == nil || *r.Memory.Limit <= 0 || *r.Memory.Swap != *r.Memory.Limit {
		bad("memory limit unset or swap granted")
	}
	if r.Pids == nil || r.Pids.Limit == nil || *r.Pids.Limit <= 0 {
		bad("pids limit unset")
	}
	if r.CPU == nil || r.CPU.Quota == nil || *r.CPU.Quota <= 0 || r.CPU.Period == nil || *r.CPU.Period == 0 {
		bad("cpu quota unset")
	}
	if len(r.Devices) == 0 || !isDenyAll(r.Devices[0]) {
		bad("device rules do not start by denying all")
	}
	for _, d := range r.Devices {
		if d.Allow && (d.Type != "c" || d.Major == nil) {
			major := "*"
			if d.Major != nil {
				major = strconv.FormatInt(*d.Major, 10)
			}
			bad("device rule allows type %q, major %s", d.Type, major)
		}
	}
	return errors.Join(errs...)
}

// checkRlimits reports each of ociRlimits that rls lacks, and each entry
// that raises a pinned one: the runtime applies every entry in turn.
func checkRlimits(rls []specs.POSIXRlimit, bad func(string, ...any)) {
	for _, want := range ociRlimits {
		if !slices.ContainsFunc(rls, func(r specs.POSIXRlimit) bool { return r.Type == want }) {
			bad("%s unset", want)
		}
	}
	for _, r := range rls {
		i := slices.IndexFunc(pinnedRlimits, func(p specs.POSIXRlimit) bool { return p.Type == r.Type })
		if i >= 0 && (r.Hard > pinnedRlimits[i].Hard || r.Soft > pinnedRlimits[i].Soft) {
			bad("%s %d/%d, above %d", r.Type, r.Soft, r.Hard, pinnedRlimits[i].Hard)
		}
	}
}

// checkOCIMount says what is wrong with m, or "". runc treats any mount
// with a bind option as a bind, whatever its type.
func checkOCIMount(m specs.Mount, tmpSource string, binds []Bind) string {
	if len(m.UIDMappings)+len(m.GIDMappings) != 0 {
		return "id-mapped"
	}
	if m.Type != "bind" && !slices.Contains(m.Options, "bind") && !slices.Contains(m.Options, "rbind") {
		if !slices.Contains(ociMountTypes, m.Type) {
			return "type " + strconv.Quote(m.Type)
		}
		if m.Type == "sysfs" && !mountFlag(m.Options, "ro", "rw") {
			return "sysfs writable"
		}
		if m.Type == "tmpfs" {
			if why := checkTmpfs(m.Destination, m.Options); why != "" {
				return why
			}
		}
		if m.Destination == TmpDir && tmpSource != "" {
			return "a " + m.Type + " where the declared /tmp source belongs"
		}
		return ""
	}
	if why := checkBindAt(m.Source, m.Destination, tmpSource); why != "" {
		return why
	}
	if m.Destination == TmpDir {
		for _, o := range ociTmpBindOptions {
			if !slices.Contains(m.Options, o) {
				return "the /tmp bind lacks " + o
			}
		}
		if !mountFlag(m.Options, "nosuid", "suid") || !mountFlag(m.Options, "nodev", "dev") {
			return "the /tmp bind undoes nosuid or nodev"
		}
		if slices.Contains(m.Options, "rbind") {
			return "the /tmp bind is recursive"
		}
		return ""
	}
	for _, b := range binds {
		if m.Source == b.Source && m.Destination == b.Target {
			if b.ReadOnly && !mountFlag(m.Options, "ro", "rw") {
				return "read-only bind made writable"
			}
			if !b.ReadOnly && !mountFlag(m.Options, "noexec", "exec") {
				return "writable bind is executable"
			}
			return ""
		}
	}
	return "binds " + strconv.Quote(m.Source) + ", which is not one of airlock's binds"
}

// mountFlag reports whether opts leave a mount flag set: on given after
// its opposite off, since the runtime applies options in order.
func mountFlag(opts []string, on, off string) bool {
	set := false
	for _, o := range opts {
		switch o {
		case on:
			set = true
		case off:
			set = false
		}
	}
	return set
}

// checkTmpfs says what is wrong with a tmpfs at dst with opts, or "": a
// writable one needs a size, nosuid and, but at /dev, an inode cap and
// nodev. /dev holds the runtime's device nodes and is root's, mode 0755.
func checkTmpfs(dst string, opts []string) string {
	if mountFlag(opts, "ro", "rw") {
		return ""
	}
	caps := map[string]string{}
	for _, o := range opts {
		if k, v, ok := strings.Cut(o, "="); ok {
			caps[k] = v // the last one applies
		}
	}
	need := []string{"nosuid", "nodev"}
	limits := []string{"size", "nr_inodes"}
	if dst == "/dev" {
		need, limits = need[:1], limits[:1]
	}
	for _, f := range need {
		if !mountFlag(opts, f, strings.TrimPrefix(f, "no")) {
			return "a writable tmpfs without " + f
		}
	}
	for _, k := range limits {
		// tmpfs reads 0 as no limit at all.
		if v := strings.TrimLeft(caps[k], "0"); v == "" || v[0] < '1' || v[0] > '9' {
			return "a writable tmpfs without a " + k + " cap"
		}
	}
	return ""
}

// maskedPaths is ociMaskedPaths and the host's per-CPU thermal_throttle
// directories (hostThermal).
func maskedPaths() []string { return append(slices.Clone(ociMaskedPaths), hostThermal()...) }

// hostThermal lists the host's per-CPU thermal_throttle directories, read
// once, not at every spec; a CPU without one has nothing to mask. Golden
// tests fix it.
var hostThermal = sync.OnceValue(func() []string {
	dirs, _ := filepath.Glob("/sys/devices/system/cpu/cpu[0-9]*/thermal_throttle")
	return dirs
})

// checkPaths reports, through bad, each of the paths OCISpec masks or
// makes read-only that masked or readonly lacks.
func checkPaths(masked, readonly []string, bad func(format string, args ...any)) {
	for _, p := range maskedPaths() {
		if !slices.Contains(masked, p) {
			bad("%s not masked", p)
		}
	}
	for _, p := range ociReadonlyPaths {
		if !slices.Contains(readonly, p) {
			bad("%s not read-only", p)
		}
	}
}

func isDenyAll(d specs.LinuxDeviceCgroup) bool {
	return !d.Allow && (d.Type == "" || d.Type == "a") && d.Major == nil && d.Minor == nil && d.Access == "rwm"
}

func withOCISeccomp(prof *SeccompProfile) OCIOpt {
	return func(s *specs.Spec) error {
		if prof == nil {
			return nil
		}
		// A copy: the spec is the caller's to marshal or change.
		s.Linux.Seccomp = CloneSeccomp(prof.Spec)
		return nil
	}
}

// CloneSeccomp copies a seccomp section deeply enough that changing the
// copy never changes sc. It copies the struct whole first, so a field a
// later runtime-spec adds is carried (shared), never dropped. nil gives nil.
func CloneSeccomp(sc *specs.LinuxSeccomp) *specs.LinuxSeccomp {
	if sc == nil {
		return nil
	}
	c := *sc
	c.DefaultErrnoRet = clonePtr(sc.DefaultErrnoRet)
	c.Architectures = slices.Clone(sc.Architectures)
	c.Flags = slices.Clone(sc.Flags)
	c.Syscalls = slices.Clone(sc.Syscalls)
	for i := range c.Syscalls {
		r := &c.Syscalls[i]
		r.Names = slices.Clone(r.Names)
		r.ErrnoRet = clonePtr(r.ErrnoRet)
		r.Args = slices.Clone(r.Args) // LinuxSeccompArg holds no pointer
	}
	return &c
}

func clonePtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
