package oci

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"

	"github.com/containerd/errdefs"
)

// trampolinePath is where a held sandbox's trampoline is bound, read-only.
const trampolinePath = "/.airlock-start"

// The trampoline is a held sandbox's first process (see Engine.Hold). It
// says it is up with one byte on stdout, reads one frame from stdin into
// its buffer, chdirs and execs the program the frame names, so the
// program is the container's process exactly as in a cold run. It never
// returns anything else: on any failure it exits 127.
//
// The frame is built by the host (frameOf) with absolute pointers into the
// trampoline's buffer, which the ELF maps at a fixed address:
//
//	[0]  total length L, 48 ≤ L ≤ frameMax
//	[8]  path   [16] argv   [24] envp   [32] cwd   [40] unused
//	[48…] the strings and the two NULL-terminated pointer arrays
const (
	frameBase = 0x600000
	frameMax  = 0x40000
	frameHead = 48
)

// trampolineReady is the byte the trampoline writes once it runs.
const trampolineReady = '\n'

// trampolineAMD64, assembled with GNU as from (Intel syntax):
//
//	_start: write(1, &ready, 1); if rax != 1 goto fail
//	        r12 = 0 (got); r13 = 8 (want); r14 = frameBase
//	loop:   while r12 < r13 { rax = read(0, r14+r12, r13-r12); if rax <= 0 goto fail; r12 += rax }
//	        if r13 == 8 { r13 = [r14]; if r13 < 48 || r13 > frameMax goto fail; goto loop }
//	        if chdir([r14+32]) != 0 goto fail
//	        execve([r14+8], [r14+16], [r14+24])
//	fail:   exit_group(127)
//	ready:  .byte '\n'
//
// TestTrampolineRuns runs it.
var trampolineAMD64 = []byte{
	0xb8, 0x01, 0x00, 0x00, 0x00, // mov eax, 1 (write)
	0xbf, 0x01, 0x00, 0x00, 0x00, // mov edi, 1
	0x48, 0x8d, 0x35, 0x84, 0x00, 0x00, 0x00, // lea rsi, [rip+ready]
	0xba, 0x01, 0x00, 0x00, 0x00, // mov edx, 1
	0x0f, 0x05, // syscall
	0x48, 0x83, 0xf8, 0x01, // cmp rax, 1
	0x75, 0x6b, // jne fail
	0x45, 0x31, 0xe4, // xor r12d, r12d
	0x41, 0xbd, 0x08, 0x00, 0x00, 0x00, // mov r13d, 8
	0x41, 0xbe, 0x00, 0x00, 0x60, 0x00, // mov r14d, frameBase
	0x4d, 0x39, 0xec, // loop: cmp r12, r13
	0x73, 0x1a, // jae have
	0x31, 0xc0, // xor eax, eax (read)
	0x31, 0xff, // xor edi, edi
	0x4b, 0x8d, 0x34, 0x26, // lea rsi, [r14+r12]
	0x4c, 0x89, 0xea, // mov rdx, r13
	0x4c, 0x29, 0xe2, // sub rdx, r12
	0x0f, 0x05, // syscall
	0x48, 0x85, 0xc0, // test rax, rax
	0x7e, 0x42, // jle fail
	0x49, 0x01, 0xc4, // add r12, rax
	0xeb, 0xe1, // jmp loop
	0x49, 0x83, 0xfd, 0x08, // have: cmp r13, 8
	0x75, 0x14, // jne done
	0x4d, 0x8b, 0x2e, // mov r13, [r14]
	0x49, 0x83, 0xfd, 0x30, // cmp r13, 48
	0x72, 0x2e, // jb fail
	0x49, 0x81, 0xfd, 0x00, 0x00, 0x04, 0x00, // cmp r13, frameMax
	0x77, 0x25, // ja fail
	0xeb, 0xc7, // jmp loop
	0xb8, 0x50, 0x00, 0x00, 0x00, // done: mov eax, 80 (chdir)
	0x49, 0x8b, 0x7e, 0x20, // mov rdi, [r14+32]
	0x0f, 0x05, // syscall
	0x48, 0x85, 0xc0, // test rax, rax
	0x75, 0x13, // jne fail
	0xb8, 0x3b, 0x00, 0x00, 0x00, // mov eax, 59 (execve)
	0x49, 0x8b, 0x7e, 0x08, // mov rdi, [r14+8]
	0x49, 0x8b, 0x76, 0x10, // mov rsi, [r14+16]
	0x49, 0x8b, 0x56, 0x18, // mov rdx, [r14+24]
	0x0f, 0x05, // syscall
	0xb8, 0xe7, 0x00, 0x00, 0x00, // fail: mov eax, 231 (exit_group)
	0xbf, 0x7f, 0x00, 0x00, 0x00, // mov edi, 127
	0x0f, 0x05, // syscall
	trampolineReady, // ready
}

// trampolineELF returns the trampoline as a static executable.
func trampolineELF() ([]byte, error) {
	if runtime.GOARCH != "amd64" {
		return nil, fmt.Errorf("%w: a warm pool on the oci engine needs airlock's trampoline, which exists only for amd64 (this host is %s)", errdefs.ErrNotImplemented, runtime.GOARCH)
	}
	return staticELF(trampolineAMD64, frameBase, frameMax), nil
}

// frameOf lays out the trampoline's frame for a program: path is what is
// executed, argv[0] included as given.
func frameOf(path string, argv, env []string, cwd string) ([]byte, error) {
	for _, s := range append(append([]string{path, cwd}, argv...), env...) {
		if strings.IndexByte(s, 0) >= 0 {
			return nil, fmt.Errorf("%w: %q contains a NUL byte", errdefs.ErrInvalidArgument, s)
		}
	}
	b := make([]byte, frameHead, 4096)
	str := func(s string) uint64 {
		off := uint64(len(b))
		b = append(append(b, s...), 0)
		return frameBase + off
	}
	le := binary.LittleEndian
	pathAt, cwdAt := str(path), str(cwd)
	ptrs := func(ss []string) []uint64 {
		out := make([]uint64, 0, len(ss)+1)
		for _, s := range ss {
			out = append(out, str(s))
		}
		return append(out, 0)
	}
	av, ev := ptrs(argv), ptrs(env)
	for len(b)%8 != 0 {
		b = append(b, 0)
	}
	array := func(p []uint64) uint64 {
		off := uint64(len(b))
		for _, v := range p {
			b = le.AppendUint64(b, v)
		}
		return frameBase + off
	}
	argvAt := array(av)
	envAt := array(ev)
	if len(b) > frameMax {
		return nil, fmt.Errorf("%w: the program's arguments and environment take %d bytes, more than a held sandbox takes (%d)", errdefs.ErrOutOfRange, len(b), frameMax)
	}
	for i, v := range []uint64{uint64(len(b)), pathAt, argvAt, envAt, cwdAt} {
		le.PutUint64(b[8*i:], v)
	}
	return b, nil
}
