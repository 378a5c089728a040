package oci

import (
	"bytes"
	"os"
	"regexp"
	"runtime"
	"strconv"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/asm"
)

// The machine code in the Go is what its sources assemble to, and the
// trampoline's source lays out the frame as trampoline.go does.
func TestMachineCodeMatchesSource(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skipf("the sources are x86-64; this host's assembler is for %s", runtime.GOARCH)
	}
	for src, code := range map[string][]byte{
		"testdata/init_amd64.S":       initAMD64,
		"testdata/trampoline_amd64.S": trampolineAMD64,
	} {
		b, err := asm.Build(t.Context(), src, asm.Raw)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, code) {
			t.Errorf("the Go's bytes are not what %s assembles to; run go generate ./engine/oci/", src)
		}
	}
	src, err := os.ReadFile("testdata/trampoline_amd64.S")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]uint64{"frameBase": frameBase, "frameMax": frameMax, "frameHead": frameHead}
	for _, m := range regexp.MustCompile(`(?m)^\s*(\w+) = (\w+)$`).FindAllStringSubmatch(string(src), -1) {
		v, err := strconv.ParseUint(m[2], 0, 64)
		if w, ok := want[m[1]]; ok && (err != nil || v != w) {
			t.Errorf("the trampoline's source sets %s = %s; trampoline.go has %#x", m[1], m[2], w)
		}
		delete(want, m[1])
	}
	if len(want) > 0 {
		t.Errorf("the trampoline's source does not set %v", want)
	}
	if got := trampolineAMD64[len(trampolineAMD64)-1]; got != trampolineReady {
		t.Errorf("the trampoline's ready byte is %q; trampoline.go has %q", got, trampolineReady)
	}
}
