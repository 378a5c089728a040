package isolation

import (
	"errors"
	"strings"
	"testing"
)

// seccompPolicy is the default policy under runc behind testSeccomp: the
// mode whose only syscall barrier is the profile.
func seccompPolicy() Policy {
	p := Default()
	p.Isolation, p.Seccomp = Seccomp, testSeccomp
	return p
}

// kernelWorkdirs are working directories inside what the runtime mounts
// from the kernel. /proc/self/fd/N as cwd is runc's CVE-2024-21626: a
// leaked host directory fd becomes the program's cwd.
var kernelWorkdirs = []string{"/proc", "/proc/self/fd/7", "/proc/1/cwd", "/proc/self/cwd", "/sys", "/sys/fs/cgroup", "/dev", "/dev/shm"}

func TestCheckWorkdir(t *testing.T) {
	for _, wd := range []string{"/", "/work", "/home/user", "/tmp", "/processes", "/system", "/devices", "/usr/src"} {
		if err := CheckWorkdir(wd); err != nil {
			t.Errorf("CheckWorkdir(%q) = %v", wd, err)
		}
	}
	for _, wd := range append([]string{"", "work", "/work/", "/work/../proc"}, kernelWorkdirs...) {
		if err := CheckWorkdir(wd); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "workdir") {
			t.Errorf("CheckWorkdir(%q) = %v, want ErrInvalid naming workdir", wd, err)
		}
	}
}

// Neither conversion takes a working directory in /proc, /sys or /dev, and
// both final checks refuse one put there afterwards.
func TestWorkdirOutsideKernelDirs(t *testing.T) {
	for _, wd := range kernelWorkdirs {
		for _, p := range []Policy{Default(), seccompPolicy()} {
			j := testOCIJob
			j.Workdir = wd
			if _, err := OCISpec(p, j); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "workdir") {
				t.Errorf("OCISpec, %s, workdir %q: %v; want ErrInvalid naming workdir", p.Isolation, wd, err)
			}
			s, err := OCISpec(p, testOCIJob)
			if err != nil {
				t.Fatal(err)
			}
			s.Process.Cwd = wd
			if err := CheckOCISpec(s, p, testOCIJob); !errors.Is(err, ErrInvalid) {
				t.Errorf("CheckOCISpec, %s, cwd %q: %v; want ErrInvalid", p.Isolation, wd, err)
			}

			dj := testJob
			dj.Workdir = wd
			if _, _, _, err := DockerConfig(p, dj); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "workdir") {
				t.Errorf("DockerConfig, %s, workdir %q: %v; want ErrInvalid naming workdir", p.Isolation, wd, err)
			}
			cfg, host, _, err := DockerConfig(p, testJob)
			if err != nil {
				t.Fatal(err)
			}
			cfg.WorkingDir = wd
			if err := CheckDockerConfig(cfg, host, p, testJob); !errors.Is(err, ErrInvalid) {
				t.Errorf("CheckDockerConfig, %s, working dir %q: %v; want ErrInvalid", p.Isolation, wd, err)
			}
		}
	}
}
