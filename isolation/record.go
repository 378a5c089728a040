package isolation

import (
	"fmt"
	"path"
	"strings"
)

// Record is the effective policy of one run as JSON: the one shape the
// Result shows (its "policy" field), the receipt carries and the policy
// hash covers. It holds no host path, so the same policy records the same
// in every run and on every host.
type Record struct {
	Isolation Mode         `json:"isolation"`
	Limits    LimitsRecord `json:"limits"`
	UID       uint32       `json:"uid"`
	GID       uint32       `json:"gid"`
	Hostname  string       `json:"hostname"`
	// SeccompSHA256 is the hex sha256 of the seccomp profile's JSON.
	SeccompSHA256 string `json:"seccomp_profile_sha256"`
	// Mounts are airlock's binds, by where they appear, in mount order.
	Mounts []MountRecord `json:"mounts"`
	// Output is the output directory's settings; null when it is off.
	Output *OutputRecord `json:"output"`
	// InputLimitBytes caps the inputs' total size.
	InputLimitBytes int64 `json:"input_limit_bytes"`
	// Workdir is the program's working directory; "" means the image's.
	Workdir string        `json:"workdir"`
	Runtime RuntimeRecord `json:"runtime"`
	// Egress is the allowlist and credential routes of a sandbox given
	// the network through its egress proxy; absent for one with none.
	Egress *EgressRecord `json:"egress,omitempty"`
}

// LimitsRecord is Limits as JSON, in integer units.
type LimitsRecord struct {
	TimeoutMS   int64 `json:"timeout_ms"`
	MemoryBytes int64 `json:"memory_bytes"`
	MilliCPUs   int64 `json:"milli_cpus"`
	// CPUs is MilliCPUs/1000, for readers of earlier Results.
	CPUs          float64 `json:"cpus"`
	Pids          int64   `json:"pids"`
	OutputBytes   int64   `json:"output_bytes"`
	TmpBytes      int64   `json:"tmp_bytes"`
	FileSizeBytes int64   `json:"file_size_bytes"`
	OpenFiles     int64   `json:"open_files"`
}

// MountRecord is one bind: its target inside the sandbox and "ro" or "rw".
type MountRecord struct {
	Target string `json:"target"`
	Mode   string `json:"mode"`
}

// OutputRecord is the output directory's settings. Where accepted and
// rejected files go on the host is not policy and is not recorded.
type OutputRecord struct {
	// Dir is the path inside the sandbox.
	Dir          string `json:"dir"`
	SizeBytes    int64  `json:"size_bytes"`
	Files        int    `json:"files"`
	MaxFileBytes int64  `json:"max_file_bytes"`
	// Types is the effective MIME allowlist.
	Types []string `json:"types"`
	// AllowDotfiles accepts paths with a component starting with '.'.
	AllowDotfiles bool `json:"allow_dotfiles"`
}

// RuntimeRecord is the OCI runtime and the policy's flags to it.
type RuntimeRecord struct {
	// Name is "runsc" or "runc".
	Name  string   `json:"name"`
	Flags []string `json:"flags"`
}

// Record returns l in integer units.
func (l Limits) Record() LimitsRecord {
	return LimitsRecord{
		TimeoutMS:     l.Timeout.Milliseconds(),
		MemoryBytes:   int64(l.Memory),
		MilliCPUs:     int64(l.CPUs),
		CPUs:          float64(l.CPUs) / 1000,
		Pids:          l.Pids,
		OutputBytes:   int64(l.Output),
		TmpBytes:      int64(l.Tmp),
		FileSizeBytes: int64(l.FileSize),
		OpenFiles:     l.OpenFiles,
	}
}

// Check reports a record whose cpus disagrees with its milli_cpus.
func (l LimitsRecord) Check() error {
	if l.CPUs != float64(l.MilliCPUs)/1000 {
		return fmt.Errorf("%w: limits: cpus %v is not milli_cpus %d / 1000", ErrInvalid, l.CPUs, l.MilliCPUs)
	}
	return nil
}

// Record returns the policy's part of the record; the caller fills in
// mounts, output, input limit, workdir and runtime.
func (p Policy) Record() Record {
	r := Record{
		Isolation: p.Isolation,
		Limits:    p.Limits.Record(),
		UID:       p.UID,
		GID:       p.GID,
		Hostname:  p.Hostname,
		Mounts:    []MountRecord{},
		Runtime:   RuntimeRecord{Flags: []string{}},
		Egress:    p.Egress.Record(),
	}
	if p.Seccomp != nil {
		r.SeccompSHA256 = p.Seccomp.SHA256
	}
	return r
}

// ReservedTargets are the sandbox's own directories: the mounts every spec
// provides (/proc, /sys, /dev, /tmp) and the image's system directories. No
// bind goes at, over or beneath one, nor at /.
var ReservedTargets = []string{"/proc", "/sys", "/dev", "/tmp", "/etc", "/bin", "/sbin", "/lib", "/lib64", "/usr"}

// CheckTarget refuses a bind target that is not absolute and clean, is /,
// or is at or beneath one of ReservedTargets. Errors wrap ErrInvalid.
func CheckTarget(p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p {
		return fmt.Errorf("%w: sandbox path %q must be absolute and clean", ErrInvalid, p)
	}
	if p == "/" {
		return fmt.Errorf("%w: sandbox path %q would cover the whole root", ErrInvalid, p)
	}
	if r := under(p, ReservedTargets); r != "" {
		return fmt.Errorf("%w: sandbox path %q would cover %s", ErrInvalid, p, r)
	}
	return nil
}

// kernelDirs are the reserved targets the runtime fills from the kernel.
// A working directory there is a door out: /proc/self/fd/N, a leaked host
// directory, is runc's CVE-2024-21626, and /proc/1/cwd another process's.
var kernelDirs = []string{"/proc", "/sys", "/dev"}

// CheckWorkdir refuses a working directory that is not absolute and
// clean, or is at or beneath /proc, /sys or /dev. Errors wrap ErrInvalid.
func CheckWorkdir(p string) error {
	if !absClean(p) {
		return fmt.Errorf("%w: workdir %q must be an absolute, clean path", ErrInvalid, p)
	}
	if r := under(p, kernelDirs); r != "" {
		return fmt.Errorf("%w: workdir %q is inside %s: give a working directory outside /proc, /sys and /dev", ErrInvalid, p, r)
	}
	return nil
}

// under returns the one of dirs that p is or is beneath, or "".
func under(p string, dirs []string) string {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return d
		}
	}
	return ""
}
