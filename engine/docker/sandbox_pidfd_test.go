package docker

import (
	"os"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/proc/proctest"
)

// killTree's tree keeps a zombie's parent link: its pid is not free yet.
func TestPpidOf(t *testing.T) {
	_, z := proctest.Zombie(t)
	for name, c := range map[string]struct{ pid, want int }{
		"self": {os.Getpid(), os.Getppid()}, "a zombie": {z.Pid, os.Getpid()}, "gone": {1 << 30, 0},
	} {
		if got := ppidOf(c.pid); got != c.want {
			t.Errorf("%s: ppidOf(%d) = %d; want %d", name, c.pid, got, c.want)
		}
	}
}
