//go:build !(linux && cgo)

package seccomp

import (
	"io"

	"github.com/opencontainers/runtime-spec/specs-go"
)

// Filter is a compiled profile; without cgo and libseccomp there is none.
type Filter struct{}

// Compile fails closed: this binary cannot build a seccomp filter.
func Compile(*Profile) (*Filter, error) { return nil, ErrNotSupported }

// ExportBPF returns ErrNotSupported.
func (*Filter) ExportBPF(io.Writer) error { return ErrNotSupported }

// Load returns ErrNotSupported.
func (*Filter) Load() error { return ErrNotSupported }

// Release does nothing.
func (*Filter) Release() {}

// onArch cannot tell without libseccomp, so Syscalls lists nothing.
func onArch(string, specs.Arch) bool { return false }

func syscallNumber(string, specs.Arch) (int32, bool) { return 0, false }

// LibVersion is empty: this binary has no libseccomp.
func LibVersion() string { return "" }
