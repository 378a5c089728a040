package oci

import (
	"encoding/binary"
	"fmt"
	"runtime"

	"github.com/containerd/errdefs"
)

// initPath is where a sandbox's idle init is bound, read-only, in its root.
const initPath = "/.airlock-init"

// initAMD64 (sandbox_init_code.go) is the sandbox's idle init, for
// x86-64: it reaps the orphans that execs leave to the sandbox's PID 1 and
// otherwise sleeps. Its source, testdata/init_amd64.S, says how, and how it
// differs from the docker engine's init. TestInitRuns runs it.
//
//go:generate go run github.com/airlock-sandbox/airlock/internal/asm/asmgen -src testdata/init_amd64.S -var initAMD64 -o sandbox_init_code.go

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
