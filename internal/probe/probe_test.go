//go:build linux && (amd64 || arm64)

package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// names are the attempts on every architecture.
var names = []string{
	"mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount",
	"fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	"unshare_newuser", "unshare_newnet", "setns",
	"clone_newnet", "clone_newuser", "clone3",
	"ptrace_traceme", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
	"bpf", "perf_event_open", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	"keyctl", "add_key", "request_key",
	"open_by_handle_at", "name_to_handle_at",
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load",
	"reboot", "swapon", "swapoff",
	"clock_settime", "clock_adjtime", "settimeofday", "acct", "quotactl",
	"socket_packet", "socket_netlink", "socket_inet_raw", "socket_unix",
	"ioctl_tiocsti", "ioctl_tiocsti_hi", "personality",
}

// amd64Names are the attempts through the int $0x80 and x32 entry points.
var amd64Names = []string{
	"int80_mount", "int80_umount2", "int80_chroot", "int80_ptrace",
	"int80_unshare", "int80_setns", "int80_bpf", "int80_perf_event_open",
	"int80_keyctl", "int80_add_key", "int80_init_module", "int80_reboot",
	"int80_swapon", "int80_acct", "int80_kexec_load", "int80_userfaultfd",
	"int80_io_uring_setup",
	"x32_mount", "x32_unshare", "x32_ptrace", "x32_bpf", "x32_keyctl",
	"x32_reboot", "x32_chroot", "x32_setns", "x32_init_module",
	"x32_perf_event_open",
}

// TestProbeUnfiltered builds the probe and runs it on the host without a
// filter to check the shape of its output. The errnos depend on the host,
// which may run the tests as root, so they are not checked here.
func TestProbeUnfiltered(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "probe")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the probe: %v\n%s", err, out)
	}

	out, err := exec.CommandContext(t.Context(), bin).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("running the probe: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("running the probe: %v", err)
	}
	lines := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if len(lines) < 2 {
		t.Fatalf("output has %d lines:\n%s", len(lines), out)
	}
	if want := "arch " + runtime.GOARCH; lines[0] != want {
		t.Errorf("first line = %q, want %q", lines[0], want)
	}
	if last := lines[len(lines)-1]; last != "done" {
		t.Errorf("last line = %q, want %q", last, "done")
	}

	var got []string
	for _, l := range lines[1 : len(lines)-1] {
		f := strings.Split(l, " ")
		if len(f) != 3 {
			t.Errorf("line %q: %d fields, want 3", l, len(f))
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			t.Errorf("line %q: errno %q is not a number", l, f[1])
		}
		got = append(got, f[0])
	}
	want := slices.Clone(names)
	if runtime.GOARCH == "amd64" {
		want = append(want, amd64Names...)
	}
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("attempts, in output order:\n%v\nwant, sorted:\n%v", got, want)
	}
}
