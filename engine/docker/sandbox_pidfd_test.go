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

// killTree hits only processes in the container's cgroup, which dockerd
// names <parent>/<cid> with the cgroupfs driver and
// <slice>/docker-<cid>.scope with systemd's, the default on cgroup v2.
func TestNamesContainer(t *testing.T) {
	const cid = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for name, c := range map[string]struct {
		procCgroup string
		want       bool
	}{
		"v2, systemd":             {"0::/system.slice/docker-" + cid + ".scope\n", true},
		"v2, cgroupfs":            {"0::/docker/" + cid + "\n", true},
		"v2, under airlock's":     {"0::/airlock/abc/" + cid + "\n", true},
		"v1, systemd":             {"12:pids:/system.slice/docker-" + cid + ".scope\n0::/system.slice/docker-" + cid + ".scope\n", true},
		"v1, cgroupfs":            {"12:pids:/docker/" + cid + "\n1:name=systemd:/docker/" + cid + "\n0::/\n", true},
		"v2, the host's":          {"0::/user.slice/user-0.slice/session-1.scope\n", false},
		"v2, another container's": {"0::/system.slice/docker-f" + cid[1:] + ".scope\n", false},
	} {
		if got := namesContainer([]byte(c.procCgroup), cid); got != c.want {
			t.Errorf("%s: namesContainer(%q) = %v; want %v", name, c.procCgroup, got, c.want)
		}
	}
}
