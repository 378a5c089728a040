package isolation

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestRecordGolden(t *testing.T) {
	tight := Default()
	tight.Isolation = Seccomp
	tight.Seccomp = testSeccomp
	tight.Limits = Limits{Timeout: 1500 * time.Millisecond, Memory: 64 << 20, CPUs: 250, Pids: 32, Output: 4096, Tmp: 8 << 20, FileSize: 2 << 20, OpenFiles: 64}
	tight.UID, tight.GID, tight.Hostname = 1000, 1001, "box"
	rec := tight.Record()
	rec.Mounts = []MountRecord{{Target: "/work/in", Mode: "ro"}, {Target: "/out", Mode: "rw"}}
	rec.Output = &OutputRecord{Dir: "/out", SizeBytes: 64 << 20, Files: 1000, MaxFileBytes: 1 << 20, Types: []string{"text/plain"}}
	rec.InputLimitBytes = 256 << 20
	rec.Workdir = "/work"
	rec.Runtime = RuntimeRecord{Name: "runc", Flags: []string{}}
	golden(t, "record-tight.json", rec)
	// The default policy, as the policy alone records it.
	golden(t, "record-default.json", Default().Record())
}

// Every limit reaches the record; a new limit must be added to it.
func TestRecordHasEveryLimit(t *testing.T) {
	l := Default().Limits.Record()
	if l.TimeoutMS == 0 || l.MemoryBytes == 0 || l.MilliCPUs == 0 || l.CPUs == 0 || l.Pids == 0 || l.OutputBytes == 0 ||
		l.TmpBytes == 0 || l.FileSizeBytes == 0 || l.OpenFiles == 0 {
		t.Errorf("a limit is missing from the record: %+v", l)
	}
	if err := l.Check(); err != nil {
		t.Error(err)
	}
	l.CPUs = 2
	if err := l.Check(); !errors.Is(err, ErrInvalid) {
		t.Errorf("cpus disagreeing with milli_cpus: %v", err)
	}
}

func TestRunscFlagsGolden(t *testing.T) {
	golden(t, "runsc-flags.json", RunscFlags())
	f := RunscFlags()
	f[0] = "changed"
	if RunscFlags()[0] == "changed" {
		t.Error("RunscFlags returns a shared slice")
	}
}

func TestMissingRunscFlags(t *testing.T) {
	for _, tc := range []struct {
		args, missing []string
	}{
		{[]string{"--network=none", "--oci-seccomp", "--debug-log=/x/%ID%/"}, nil},
		{[]string{"--network=none", "--oci-seccomp=true"}, nil},
		{[]string{"--network=none"}, []string{"--oci-seccomp"}},
		{nil, RunscFlags()},
		{[]string{"--network=host", "--oci-seccomp=false"}, RunscFlags()},
		{[]string{"--network=none", "--oci-seccomp", "--oci-seccomp=false", "-network=host"}, RunscFlags()},
	} {
		if got := MissingRunscFlags(tc.args); !slices.Equal(got, tc.missing) {
			t.Errorf("%q: missing %q, want %q", tc.args, got, tc.missing)
		}
	}
}

func TestCheckTarget(t *testing.T) {
	for _, p := range []string{"/work", "/work/in", "/out", "/data/x", "/procfs", "/usrlocal", "/home/x"} {
		if err := CheckTarget(p); err != nil {
			t.Errorf("CheckTarget(%q) = %v", p, err)
		}
	}
	for _, p := range append([]string{"/", "work", "/work/", "/work/../etc", "/proc/self", "/dev/shm", "/tmp/x", "/etc/passwd", "/usr/bin", "/lib64"}, ReservedTargets...) {
		if err := CheckTarget(p); !errors.Is(err, ErrInvalid) {
			t.Errorf("CheckTarget(%q) = %v, want ErrInvalid", p, err)
		}
	}
	// Every mount the spec provides is reserved, so no bind can shadow it.
	for _, m := range ociDefault().Mounts {
		if err := CheckTarget(m.Destination); err == nil {
			t.Errorf("the spec's own mount %s is not reserved", m.Destination)
		}
	}
	if err := CheckTarget("/proc"); err == nil || !strings.Contains(err.Error(), "/proc") {
		t.Errorf("CheckTarget(/proc) = %v, want it to name /proc", err)
	}
}

// Both engines' conversions refuse a bind at any reserved target, as the
// runner does: one list, three places.
func TestBindsRefuseReservedTargets(t *testing.T) {
	for _, target := range append([]string{"/", "/etc/x", "/usr/local"}, ReservedTargets...) {
		b := []Bind{{Source: "/var/lib/airlock/runs/r/in", Target: target, ReadOnly: true}}
		dj := testJob
		dj.Binds = b
		if _, _, _, err := DockerConfig(Default(), dj); !errors.Is(err, ErrInvalid) {
			t.Errorf("DockerConfig with a bind at %s: %v", target, err)
		}
		oj := testOCIJob
		oj.Binds = b
		if _, err := OCISpec(Default(), oj); !errors.Is(err, ErrInvalid) {
			t.Errorf("OCISpec with a bind at %s: %v", target, err)
		}
	}
}
