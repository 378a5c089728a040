package oci

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// runTrampoline runs the trampoline on the host with stdin as its input.
func runTrampoline(t *testing.T, stdin []byte) (string, int) {
	t.Helper()
	b, err := trampolineELF()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "start")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin)
	cmd.Stdin = bytes.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Env = []string{}
	cmd.Run()
	return out.String(), cmd.ProcessState.ExitCode()
}

// The trampoline announces itself, then becomes the framed program with
// its argv, environment and working directory; the rest of stdin is the
// program's.
func TestTrampolineRuns(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		if _, err := trampolineELF(); err == nil {
			t.Fatal("trampolineELF gave code for an architecture it has none for")
		}
		return
	}
	dir := t.TempDir()
	f, err := frameOf("/bin/sh", []string{"sh", "-c", `echo "$0|$1|$GREETING|$(pwd)"; cat`, "zero", "arg one"}, []string{"GREETING=hi there", "PATH=/usr/bin:/bin"}, dir)
	if err != nil {
		t.Fatal(err)
	}
	out, code := runTrampoline(t, append(f, "and stdin\n"...))
	want := "\nzero|arg one|hi there|" + dir + "\nand stdin\n"
	if out != want || code != 0 {
		t.Fatalf("got %q exit %d; want %q exit 0", out, code, want)
	}
}

// Anything but a whole, well-formed frame ends the trampoline with 127
// before it runs anything.
func TestTrampolineRefusesBadFrames(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		return
	}
	good, err := frameOf("/bin/true", []string{"true"}, nil, "/")
	if err != nil {
		t.Fatal(err)
	}
	short := append([]byte{}, good...)
	binary.LittleEndian.PutUint64(short, 8)
	huge := append([]byte{}, good...)
	binary.LittleEndian.PutUint64(huge, frameMax+1)
	nodir, _ := frameOf("/bin/true", []string{"true"}, nil, "/no/such/dir")
	missing, _ := frameOf("/no/such/program", []string{"x"}, nil, "/")
	for name, in := range map[string][]byte{
		"empty": nil, "truncated": good[:len(good)-1], "length below the header": short,
		"length above the buffer": huge, "missing workdir": nodir, "missing program": missing,
	} {
		out, code := runTrampoline(t, in)
		if out != "\n" || code != 127 {
			t.Errorf("%s: got %q exit %d; want only the ready byte and exit 127", name, out, code)
		}
	}
	if out, code := runTrampoline(t, good); out != "\n" || code != 0 {
		t.Errorf("good frame: got %q exit %d", out, code)
	}
}

func TestFrameOfRefusesWhatItCannotCarry(t *testing.T) {
	if _, err := frameOf("/bin/true", []string{"a\x00b"}, nil, "/"); err == nil {
		t.Error("a NUL byte in an argument was framed")
	}
	if _, err := frameOf("/bin/true", []string{strings.Repeat("x", frameMax)}, nil, "/"); err == nil {
		t.Error("arguments larger than the buffer were framed")
	}
}
