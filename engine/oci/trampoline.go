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

// trampolineAMD64 (trampoline_code.go) is the trampoline for x86-64, from
// testdata/trampoline_amd64.S. TestTrampolineRuns runs it.
//
//go:generate go run github.com/airlock-sandbox/airlock/internal/asm/asmgen -src testdata/trampoline_amd64.S -var trampolineAMD64 -o trampoline_code.go

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
