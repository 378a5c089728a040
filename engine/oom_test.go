package engine

import (
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cgroup"
)

// TestOOMKilledOnlyWhenCounted: a run is OOM-killed when its cgroup
// counted the kill. A SIGKILL at the memory limit stands in for the count
// only where runc's removed child took it along (v1): a program under
// runsc, or on v2, that killed itself at its limit exited.
func TestOOMKilledOnlyWhenCounted(t *testing.T) {
	const limit = 64 << 20
	atLimit := cgroup.Stats{MemoryPeak: limit}
	hit := cgroup.Stats{MemoryPeak: limit - 4096, MemoryLimitHits: 3}
	killed := cgroup.Stats{MemoryPeak: limit, OOMKills: 1}
	for _, c := range []struct {
		what      string
		st        cgroup.Stats
		code      int
		countLost bool
		want      bool
	}{
		{"counted kill", killed, 137, false, true},
		{"counted kill, runc on v1", killed, 137, true, true},
		{"self SIGKILL at the limit, counted group", atLimit, 137, false, false},
		{"exit 137 after limit hits, counted group", hit, 137, false, false},
		{"SIGKILL at the limit, runc on v1", atLimit, 137, true, true},
		{"SIGKILL after limit hits, runc on v1", hit, 137, true, true},
		{"exit 1 at the limit, runc on v1", atLimit, 1, true, false},
		{"SIGKILL below the limit, runc on v1", cgroup.Stats{MemoryPeak: limit / 2}, 137, true, false},
	} {
		if got := OOMKilled(c.st, c.code, limit, c.countLost); got != c.want {
			t.Errorf("%s (%+v, exit %d): OOM-killed %v, want %v", c.what, c.st, c.code, got, c.want)
		}
	}
}
