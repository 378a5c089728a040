package proc

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// An inherited descriptor (no close-on-exec) is closed, Go's own are kept.
func TestCloseInherited(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	own, err := os.Open("/dev/null")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	// As a parent's descriptor looks: close-on-exec off.
	inherited, err := unix.Dup(int(w.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	if err := CloseInherited(); err != nil {
		t.Fatal(err)
	}
	if _, err := unix.FcntlInt(uintptr(inherited), unix.F_GETFD, 0); err == nil {
		unix.Close(inherited)
		t.Errorf("the inherited descriptor %d is still open", inherited)
	}
	if _, err := own.Stat(); err != nil {
		t.Errorf("Go's own descriptor was closed: %v", err)
	}
	// A child started afterwards sees nothing above stderr but its own
	// listing's.
	out, err := exec.Command("ls", "/proc/self/fd").Output()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(string(out))); n > 4 {
		t.Errorf("a child holds %d descriptors: %s", n, out)
	}
}
