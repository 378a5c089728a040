//go:build linux && (amd64 || arm64)

package main

import "golang.org/x/sys/unix"

// call is one attempt: a raw system call, made in a throwaway child.
type call struct {
	name   string
	nr     uintptr
	args   [6]uintptr
	compat bool // enter through int $0x80 (amd64 only)
	// forkFlags, when set, makes the fork itself the attempt: the child is
	// made with these clone flags and exits at once.
	forkFlags uintptr
}

// Arguments that no unfiltered kernel accepts.
const (
	bad      = uintptr(1)       // in page zero, never mapped: reads give EFAULT
	noFD     = ^uintptr(0)      // -1
	closedFD = uintptr(1 << 30) // far above any open descriptor
	noPID    = uintptr(1 << 30) // above PID_MAX_LIMIT
	badFlag  = uintptr(1 << 31) // no call below assigns this bit
)

const (
	readImpliesExec  = 0x0400000 // personality(2) READ_IMPLIES_EXEC
	uffdUserModeOnly = 1         // userfaultfd(2) UFFD_USER_MODE_ONLY
	fsconfigCreate   = unix.FSCONFIG_CMD_CREATE
)

// nativeCalls lists the attempts through the native entry point. notTTY is a
// descriptor that is not a terminal. Each comment gives the errno that an
// unfiltered kernel returns. "EPERM first" marks a capability check that the
// kernel makes before the arguments, so an unprivileged caller gets EPERM
// with or without the filter.
func nativeCalls(notTTY uintptr) []call {
	return []call{
		// Mounts and the root.
		{name: "mount", nr: unix.SYS_MOUNT, args: [6]uintptr{bad, bad, bad}},                        // EFAULT
		{name: "umount2", nr: unix.SYS_UMOUNT2, args: [6]uintptr{bad}},                              // EFAULT
		{name: "pivot_root", nr: unix.SYS_PIVOT_ROOT, args: [6]uintptr{bad, bad}},                   // EFAULT; EPERM first
		{name: "chroot", nr: unix.SYS_CHROOT, args: [6]uintptr{bad}},                                // EFAULT
		{name: "open_tree", nr: unix.SYS_OPEN_TREE, args: [6]uintptr{noFD, bad}},                    // EFAULT
		{name: "move_mount", nr: unix.SYS_MOVE_MOUNT, args: [6]uintptr{noFD, bad, noFD, bad}},       // EFAULT; EPERM first
		{name: "fsopen", nr: unix.SYS_FSOPEN, args: [6]uintptr{bad}},                                // EFAULT; EPERM first
		{name: "fsconfig", nr: unix.SYS_FSCONFIG, args: [6]uintptr{closedFD, fsconfigCreate}},       // EBADF; -1 gives EINVAL
		{name: "fsmount", nr: unix.SYS_FSMOUNT, args: [6]uintptr{noFD}},                             // EBADF; EPERM first
		{name: "fspick", nr: unix.SYS_FSPICK, args: [6]uintptr{noFD, bad}},                          // EFAULT; EPERM first
		{name: "mount_setattr", nr: unix.SYS_MOUNT_SETATTR, args: [6]uintptr{noFD, bad, 0, bad, 0}}, // EINVAL: size 0

		// Namespaces. The child is single-threaded, so unshare can succeed.
		{name: "unshare_newuser", nr: unix.SYS_UNSHARE, args: [6]uintptr{unix.CLONE_NEWUSER}}, // OK; EPERM or ENOSPC where user namespaces are off
		{name: "unshare_newnet", nr: unix.SYS_UNSHARE, args: [6]uintptr{unix.CLONE_NEWNET}},   // OK as root; EPERM first
		{name: "setns", nr: unix.SYS_SETNS, args: [6]uintptr{noFD, 0}},                        // EBADF
		{name: "clone_newnet", forkFlags: unix.CLONE_NEWNET},                                  // OK as root; EPERM first
		{name: "clone_newuser", forkFlags: unix.CLONE_NEWUSER},                                // OK; as unshare_newuser
		{name: "clone3", nr: unix.SYS_CLONE3, args: [6]uintptr{bad, 0}},                       // EINVAL: size 0

		// Other processes' memory.
		{name: "ptrace_traceme", nr: unix.SYS_PTRACE, args: [6]uintptr{unix.PTRACE_TRACEME}},                      // OK; EPERM where Yama ptrace_scope is 2 or 3
		{name: "process_vm_readv", nr: unix.SYS_PROCESS_VM_READV, args: [6]uintptr{0, bad, 1, bad, 1, badFlag}},   // EINVAL: flags
		{name: "process_vm_writev", nr: unix.SYS_PROCESS_VM_WRITEV, args: [6]uintptr{0, bad, 1, bad, 1, badFlag}}, // EINVAL: flags
		{name: "kcmp", nr: unix.SYS_KCMP, args: [6]uintptr{noPID, noPID}},                                         // ESRCH; ENOSYS without CONFIG_KCMP
		{name: "pidfd_getfd", nr: unix.SYS_PIDFD_GETFD, args: [6]uintptr{noFD, 0, 0}},                             // EBADF

		// Kernel attack surface.
		{name: "bpf", nr: unix.SYS_BPF, args: [6]uintptr{badFlag}},                                       // EINVAL: cmd; before 6.5, EPERM first if unprivileged BPF is off
		{name: "perf_event_open", nr: unix.SYS_PERF_EVENT_OPEN, args: [6]uintptr{bad, 0, noFD, noFD, 0}}, // EFAULT
		{name: "userfaultfd", nr: unix.SYS_USERFAULTFD, args: [6]uintptr{uffdUserModeOnly | badFlag}},    // EINVAL: flags
		{name: "io_uring_setup", nr: unix.SYS_IO_URING_SETUP, args: [6]uintptr{0, bad}},                  // EFAULT; EPERM first if kernel.io_uring_disabled
		{name: "io_uring_enter", nr: unix.SYS_IO_URING_ENTER, args: [6]uintptr{noFD}},                    // EBADF
		// -1 would name the ring-less register operations.
		{name: "io_uring_register", nr: unix.SYS_IO_URING_REGISTER, args: [6]uintptr{closedFD}},            // EBADF
		{name: "keyctl", nr: unix.SYS_KEYCTL, args: [6]uintptr{badFlag}},                                   // EOPNOTSUPP, printed as ENOTSUP (same number)
		{name: "add_key", nr: unix.SYS_ADD_KEY, args: [6]uintptr{bad, bad, bad, 0, 0}},                     // EFAULT
		{name: "request_key", nr: unix.SYS_REQUEST_KEY, args: [6]uintptr{bad, bad, bad, 0}},                // EFAULT
		{name: "open_by_handle_at", nr: unix.SYS_OPEN_BY_HANDLE_AT, args: [6]uintptr{noFD, bad}},           // EFAULT; EPERM first on older kernels
		{name: "name_to_handle_at", nr: unix.SYS_NAME_TO_HANDLE_AT, args: [6]uintptr{noFD, bad, bad, bad}}, // EFAULT

		// The machine: modules, kexec, reboot, swap, clocks, accounting, quotas.
		{name: "init_module", nr: unix.SYS_INIT_MODULE, args: [6]uintptr{bad, 0, bad}},                       // ENOEXEC: length 0; EPERM first
		{name: "finit_module", nr: unix.SYS_FINIT_MODULE, args: [6]uintptr{noFD, bad, badFlag}},              // EINVAL: flags; EPERM first
		{name: "delete_module", nr: unix.SYS_DELETE_MODULE, args: [6]uintptr{bad, 0}},                        // EFAULT; EPERM first
		{name: "kexec_load", nr: unix.SYS_KEXEC_LOAD, args: [6]uintptr{0, 17, bad, badFlag}},                 // EINVAL: over 16 segments; EPERM first
		{name: "kexec_file_load", nr: unix.SYS_KEXEC_FILE_LOAD, args: [6]uintptr{noFD, noFD, 0, 0, badFlag}}, // EINVAL: flags; EPERM first
		{name: "reboot", nr: unix.SYS_REBOOT, args: [6]uintptr{0, 0, 0, 0}},                                  // EINVAL: magic; EPERM first
		{name: "swapon", nr: unix.SYS_SWAPON, args: [6]uintptr{bad, badFlag}},                                // EINVAL: flags
		{name: "swapoff", nr: unix.SYS_SWAPOFF, args: [6]uintptr{bad}},                                       // EFAULT; EPERM first
		{name: "clock_settime", nr: unix.SYS_CLOCK_SETTIME, args: [6]uintptr{unix.CLOCK_REALTIME, bad}},      // EFAULT
		{name: "clock_adjtime", nr: unix.SYS_CLOCK_ADJTIME, args: [6]uintptr{unix.CLOCK_REALTIME, bad}},      // EFAULT
		{name: "settimeofday", nr: unix.SYS_SETTIMEOFDAY, args: [6]uintptr{bad, 0}},                          // EFAULT
		{name: "acct", nr: unix.SYS_ACCT, args: [6]uintptr{bad}},                                             // EFAULT; EPERM first
		{name: "quotactl", nr: unix.SYS_QUOTACTL, args: [6]uintptr{0xff, bad, 0, bad}},                       // EINVAL: quota type 255

		// Sockets. AF_UNIX must stay allowed; the raw ones need CAP_NET_RAW.
		{name: "socket_packet", nr: unix.SYS_SOCKET, args: [6]uintptr{unix.AF_PACKET, unix.SOCK_RAW, 0}},                    // OK as root; EPERM first
		{name: "socket_netlink", nr: unix.SYS_SOCKET, args: [6]uintptr{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE}}, // OK
		{name: "socket_inet_raw", nr: unix.SYS_SOCKET, args: [6]uintptr{unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP}},    // OK as root; EPERM first
		{name: "socket_unix", nr: unix.SYS_SOCKET, args: [6]uintptr{unix.AF_UNIX, unix.SOCK_STREAM, 0}},                     // OK, and allowed

		// Terminal injection. The kernel reads the request as 32 bits, so a
		// filter must mask the high half to catch the second.
		{name: "ioctl_tiocsti", nr: unix.SYS_IOCTL, args: [6]uintptr{notTTY, unix.TIOCSTI, bad}},            // ENOTTY
		{name: "ioctl_tiocsti_hi", nr: unix.SYS_IOCTL, args: [6]uintptr{notTTY, 1<<32 | unix.TIOCSTI, bad}}, // ENOTTY

		{name: "personality", nr: unix.SYS_PERSONALITY, args: [6]uintptr{readImpliesExec}}, // OK
	}
}
