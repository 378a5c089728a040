//go:build !(linux && cgo)

package seccomp

import (
	"errors"
	"testing"
)

// TestStubFailsClosed: a binary without libseccomp refuses every profile.
func TestStubFailsClosed(t *testing.T) {
	if _, err := Load("default"); !errors.Is(err, ErrNotSupported) {
		t.Errorf("Load: %v, want ErrNotSupported", err)
	}
	if _, err := Compile(&Profile{}); !errors.Is(err, ErrNotSupported) {
		t.Errorf("Compile: %v, want ErrNotSupported", err)
	}
	if _, err := SpecOf([]byte(`{"defaultAction": "SCMP_ACT_ERRNO", "architectures": ["SCMP_ARCH_X86_64"]}`)); !errors.Is(err, ErrNotSupported) {
		t.Errorf("SpecOf: %v, want ErrNotSupported", err)
	}
}
