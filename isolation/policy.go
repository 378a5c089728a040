package isolation

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/units"
)

// ErrInvalid is wrapped by every policy validation error.
var ErrInvalid = errors.New("invalid policy")

// Mode names the main barrier between the program and the host kernel.
type Mode string

const (
	// GVisor runs the program under gVisor's runsc: the program's system
	// calls are served by a user-space kernel.
	GVisor Mode = "gvisor"
	// Seccomp runs the program under runc behind a strict seccomp allowlist.
	Seccomp Mode = "seccomp"
)

// ParseMode reads an --isolation value.
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case GVisor, Seccomp:
		return Mode(s), nil
	}
	return "", fmt.Errorf("%w: isolation %q: use %q or %q", ErrInvalid, s, GVisor, Seccomp)
}

// Limits caps what one run may consume.
type Limits struct {
	// Timeout is the wall-clock budget from the moment the sandbox starts.
	Timeout time.Duration
	// Memory is the hard memory limit; swap is never granted on top of it.
	Memory units.Bytes
	// CPUs is the CPU bandwidth, in thousandths of a CPU.
	CPUs units.MilliCPUs
	// Pids caps the number of tasks (processes and threads).
	Pids int64
	// Output caps the bytes captured from each of stdout and stderr.
	Output units.Bytes
	// Tmp is the size of the writable tmpfs at /tmp.
	Tmp units.Bytes
	// FileSize is RLIMIT_FSIZE: the largest file the program may write.
	FileSize units.Bytes
	// OpenFiles is RLIMIT_NOFILE.
	OpenFiles int64
}

// Policy is everything that decides what a sandbox may do. Its fields can
// only narrow the sandbox: capabilities, host mounts and a writable root
// are not expressible, and the one network it can ask for is Egress, a
// proxy's allowlist (its zero value: no network at all).
type Policy struct {
	Isolation Mode
	Limits    Limits
	// UID and GID are the numeric identity the program runs as; never 0.
	UID, GID uint32
	// Hostname is what the sandbox sees as its host name.
	Hostname string
	// Seccomp is the syscall filter; the seccomp isolation mode refuses to
	// run without one, and gVisor carries it as a second layer.
	Seccomp *SeccompProfile
	// Egress is the hosts the sandbox may reach through its egress proxy;
	// its zero value gives it no network but loopback.
	Egress Egress
}

// SeccompProfile is a seccomp profile that has been parsed and compiled.
type SeccompProfile struct {
	// JSON is the profile as written (Docker/OCI format), for dockerd.
	JSON []byte
	// Spec is the same profile for runtime bundles.
	Spec *specs.LinuxSeccomp
	// SHA256 is the hex sha256 of JSON, recorded in every Result.
	SHA256 string
}

// Nobody is the uid and gid of the unprivileged "nobody" account.
const Nobody = 65534

// Default returns the default policy: gVisor, no network, no capabilities,
// read-only root, uid 65534, and modest limits.
func Default() Policy {
	return Policy{
		Isolation: GVisor,
		Limits: Limits{
			Timeout:   30 * time.Second,
			Memory:    512 << 20,
			CPUs:      1000,
			Pids:      256,
			Output:    1 << 20,
			Tmp:       64 << 20,
			FileSize:  64 << 20,
			OpenFiles: 1024,
		},
		UID:      Nobody,
		GID:      Nobody,
		Hostname: "sandbox",
	}
}

// Bounds keep a limit within what the engines can apply meaningfully.
const (
	minMemory = 6 << 20 // Docker refuses less than 6 MiB.
	minPids   = 8
	// MaxPids keeps every host pids limit the engines derive (gVisor's
	// 2×pids+64, plus one for a nested runtime cgroup) far below the
	// kernel's PID_MAX_LIMIT (4194304), which pids.max refuses to pass.
	MaxPids    = 32768
	maxNoFile  = 1 << 20
	minTimeout = 10 * time.Millisecond
)

// MaxTimeout is the longest timeout a policy takes: a year. A deadline
// airlock derives from a duration (the timeout and a minute's grace, a
// sandbox's TTL) then stays far from overflowing time.Duration, which
// would put it in the past.
const MaxTimeout = 365 * 24 * time.Hour

// MinCPUs is the smallest CPU limit: a hundredth of a CPU is a CFS quota
// of 1 ms per 100 ms period, the least the kernel takes (cpu.cfs_quota_us
// refuses less), and the least Docker takes too.
const MinCPUs units.MilliCPUs = 10

// Validate checks every field. A zero limit is an error, never "unlimited".
func (p Policy) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalid}, args...)...))
	}
	if _, err := ParseMode(string(p.Isolation)); err != nil {
		errs = append(errs, err)
	}
	l := p.Limits
	if l.Timeout < minTimeout {
		bad("timeout %v is below the minimum of %v", l.Timeout, minTimeout)
	}
	if l.Timeout > MaxTimeout {
		bad("timeout %v is above the maximum of %v (a year)", l.Timeout, MaxTimeout)
	}
	if l.Memory < minMemory {
		bad("memory %v is below the minimum of %v", l.Memory, units.Bytes(minMemory))
	}
	if l.CPUs < MinCPUs {
		bad("cpus %v is below the minimum of %v", l.CPUs, MinCPUs)
	}
	if l.Pids < minPids || l.Pids > MaxPids {
		bad("pids %d must be between %d and %d", l.Pids, minPids, MaxPids)
	}
	if l.Output < 1024 {
		bad("output limit %v is below the minimum of 1KiB", l.Output)
	}
	if l.Tmp < 1<<20 {
		bad("tmp size %v is below the minimum of 1MiB", l.Tmp)
	}
	if l.FileSize < 1<<20 {
		bad("file size limit %v is below the minimum of 1MiB", l.FileSize)
	}
	if l.OpenFiles < 16 || l.OpenFiles > maxNoFile {
		bad("open files %d must be between 16 and %d", l.OpenFiles, maxNoFile)
	}
	if p.Isolation == Seccomp && (p.Seccomp == nil || p.Seccomp.Spec == nil || len(p.Seccomp.JSON) == 0) {
		bad("seccomp isolation needs a seccomp profile")
	}
	if p.UID == 0 || p.GID == 0 {
		bad("uid and gid must not be 0 (root)")
	}
	switch e := p.Egress; {
	case e.Bytes != 0 && !e.On():
		bad("egress limit %v caps the egress proxy, and this sandbox has no egress: allow a host (allow_host, --allow-host) or leave the limit out", e.Bytes)
	case e.Bytes < 0 || (e.Bytes != 0 && e.Bytes < 1024):
		bad("egress limit %v is below the minimum of 1KiB", e.Bytes)
	}
	if !validHostname(p.Hostname) {
		bad("hostname %q must be 1 to 63 letters, digits or '-'", p.Hostname)
	}
	return errors.Join(errs...)
}

func validHostname(h string) bool {
	if h == "" || len(h) > 63 || strings.HasPrefix(h, "-") {
		return false
	}
	for _, r := range h {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
			return false
		}
	}
	return true
}

// User returns the "uid:gid" string engines take.
func (p Policy) User() string {
	return strconv.FormatUint(uint64(p.UID), 10) + ":" + strconv.FormatUint(uint64(p.GID), 10)
}

// WithDefaults returns p with every zero field taken from Default. A zero
// UID or GID becomes nobody, never root.
func (p Policy) WithDefaults() Policy {
	d := Default()
	if p.Isolation == "" {
		p.Isolation = d.Isolation
	}
	if p.UID == 0 {
		p.UID = d.UID
	}
	if p.GID == 0 {
		p.GID = d.GID
	}
	if p.Hostname == "" {
		p.Hostname = d.Hostname
	}
	l, dl := &p.Limits, d.Limits
	if l.Timeout == 0 {
		l.Timeout = dl.Timeout
	}
	if l.Memory == 0 {
		l.Memory = dl.Memory
	}
	if l.CPUs == 0 {
		l.CPUs = dl.CPUs
	}
	if l.Pids == 0 {
		l.Pids = dl.Pids
	}
	if l.Output == 0 {
		l.Output = dl.Output
	}
	if l.Tmp == 0 {
		l.Tmp = dl.Tmp
	}
	if l.FileSize == 0 {
		l.FileSize = dl.FileSize
	}
	if l.OpenFiles == 0 {
		l.OpenFiles = dl.OpenFiles
	}
	if p.Egress.On() && p.Egress.Bytes == 0 {
		p.Egress.Bytes = DefaultEgressBytes
	}
	return p
}
