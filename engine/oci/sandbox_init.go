package oci

import (
	"encoding/binary"
	"fmt"
	"runtime"

	"github.com/containerd/errdefs"
)

// initPath is where a sandbox's idle init is bound, read-only, in its root.
const initPath = "/.airlock-init"

// initAMD64 is the sandbox's idle init, for x86-64: it reaps the orphans
// that execs leave to the sandbox's PID 1 and otherwise sleeps. Any image
// works, since it needs nothing from the image (no sleep, no libc).
//
//	_start: rt_sigprocmask(SIG_BLOCK, &set, NULL, 8)
//	loop:   while wait4(-1, NULL, WNOHANG, NULL) > 0 {}
//	        rt_sigtimedwait(&set, NULL, NULL, 8); goto loop
//	set:    1<<(SIGCHLD-1)
//
// SIGCHLD is blocked so that it stays pending (an unblocked default
// SIGCHLD is discarded) and rt_sigtimedwait wakes for it. Assembled with
// GNU as from the lines above; TestInitRuns runs it.
var initAMD64 = []byte{
	0xb8, 0x0e, 0x00, 0x00, 0x00, // mov eax, 14 (rt_sigprocmask)
	0x31, 0xff, // xor edi, edi (SIG_BLOCK)
	0x48, 0x8d, 0x35, 0x3f, 0x00, 0x00, 0x00, // lea rsi, [rip+set]
	0x31, 0xd2, // xor edx, edx
	0x41, 0xba, 0x08, 0x00, 0x00, 0x00, // mov r10d, 8
	0x0f, 0x05, // syscall
	0xb8, 0x3d, 0x00, 0x00, 0x00, // loop: mov eax, 61 (wait4)
	0xbf, 0xff, 0xff, 0xff, 0xff, // mov edi, -1
	0x31, 0xf6, // xor esi, esi
	0xba, 0x01, 0x00, 0x00, 0x00, // mov edx, 1 (WNOHANG)
	0x45, 0x31, 0xd2, // xor r10d, r10d
	0x0f, 0x05, // syscall
	0x48, 0x85, 0xc0, // test rax, rax
	0x7f, 0xe5, // jg loop
	0xb8, 0x80, 0x00, 0x00, 0x00, // mov eax, 128 (rt_sigtimedwait)
	0x48, 0x8d, 0x3d, 0x0e, 0x00, 0x00, 0x00, // lea rdi, [rip+set]
	0x31, 0xf6, // xor esi, esi
	0x31, 0xd2, // xor edx, edx
	0x41, 0xba, 0x08, 0x00, 0x00, 0x00, // mov r10d, 8
	0x0f, 0x05, // syscall
	0xeb, 0xcb, // jmp loop
	0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, // set: 1<<16
}

// initELF returns the init as a static ELF executable for the host's
// architecture.
func initELF() ([]byte, error) {
	if runtime.GOARCH != "amd64" {
		return nil, fmt.Errorf("%w: long-lived sandboxes of the oci engine need an idle init, which airlock has only for amd64 (this host is %s); use --engine docker", errdefs.ErrNotImplemented, runtime.GOARCH)
	}
	return staticELF(initAMD64, 0, 0), nil
}

// staticELF wraps x86-64 code in a static executable: one read-and-execute
// segment, no sections, and, when bssSize is set, a zeroed read-write
// segment at bssAddr.
func staticELF(code []byte, bssAddr, bssSize uint64) []byte {
	const base, ehsize, phsize = 0x400000, 64, 56
	phnum := 1
	if bssSize > 0 {
		phnum = 2
	}
	hdr := ehsize + phnum*phsize
	b := make([]byte, hdr, hdr+len(code))
	copy(b, []byte{0x7f, 'E', 'L', 'F', 2, 1, 1}) // 64-bit, little-endian, version 1
	le := binary.LittleEndian
	le.PutUint16(b[16:], 2)  // ET_EXEC
	le.PutUint16(b[18:], 62) // EM_X86_64
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[24:], base+uint64(hdr)) // entry
	le.PutUint64(b[32:], ehsize)           // phoff
	le.PutUint16(b[52:], ehsize)
	le.PutUint16(b[54:], phsize)
	le.PutUint16(b[56:], uint16(phnum))
	le.PutUint16(b[58:], 64)
	ph := b[ehsize:]
	size := uint64(hdr + len(code))
	le.PutUint32(ph[0:], 1)     // PT_LOAD
	le.PutUint32(ph[4:], 5)     // PF_R|PF_X
	le.PutUint64(ph[16:], base) // vaddr
	le.PutUint64(ph[24:], base) // paddr
	le.PutUint64(ph[32:], size)
	le.PutUint64(ph[40:], size)
	le.PutUint64(ph[48:], 0x1000)
	if bssSize > 0 {
		ph = b[ehsize+phsize:]
		le.PutUint32(ph[0:], 1) // PT_LOAD
		le.PutUint32(ph[4:], 6) // PF_R|PF_W
		le.PutUint64(ph[16:], bssAddr)
		le.PutUint64(ph[24:], bssAddr)
		le.PutUint64(ph[40:], bssSize) // memsz; filesz 0: all zero
		le.PutUint64(ph[48:], 0x1000)
	}
	return append(b, code...)
}
