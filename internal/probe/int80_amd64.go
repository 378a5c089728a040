//go:build linux

package main

// int80 makes a 32-bit system call through int $0x80: i386 number trap, with
// arguments in EBX, ECX, EDX, ESI and EDI. It returns EAX.
func int80(trap, a1, a2, a3, a4, a5 uintptr) (r uintptr)

// int80Calls are attempts by their i386 numbers (arch/x86/entry/syscalls/
// syscall_32.tbl). The kernel reads the low 32 bits of each argument.
// gVisor has no 32-bit calls and runs int $0x80 as a 64-bit call with the
// i386 number, so under runsc these lines report unrelated calls.
var int80Calls = []via{
	{"mount", "mount", 21},
	{"umount2", "umount2", 52},
	{"chroot", "chroot", 61},
	{"ptrace", "ptrace_traceme", 26},
	{"unshare", "unshare_newuser", 310},
	{"setns", "setns", 346},
	{"bpf", "bpf", 357},
	{"perf_event_open", "perf_event_open", 336},
	{"keyctl", "keyctl", 288},
	{"add_key", "add_key", 286},
	{"init_module", "init_module", 128},
	{"reboot", "reboot", 88},
	{"swapon", "swapon", 87},
	{"acct", "acct", 51},
	{"kexec_load", "kexec_load", 283},
	{"userfaultfd", "userfaultfd", 374},
	{"io_uring_setup", "io_uring_setup", 425},
}
