//go:build linux

package main

// x32Bit marks a system call number as x32 (__X32_SYSCALL_BIT).
const x32Bit = 0x40000000

// x32Calls are attempts by their x32 numbers (arch/x86/entry/syscalls/
// syscall_64.tbl). Most are the x86_64 numbers, but ptrace is one of the
// x32-only entries at 512 and above: 101 is 64-bit only.
var x32Calls = []via{
	{"mount", "mount", 165},
	{"unshare", "unshare_newuser", 272},
	{"ptrace", "ptrace_traceme", 521},
	{"bpf", "bpf", 321},
	{"keyctl", "keyctl", 250},
	{"reboot", "reboot", 169},
	{"chroot", "chroot", 161},
	{"setns", "setns", 308},
	{"init_module", "init_module", 175},
	{"perf_event_open", "perf_event_open", 298},
}
