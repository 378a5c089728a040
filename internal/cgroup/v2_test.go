package cgroup

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
)

// fakeV2 is a cgroup v2 group in a plain directory: the files a test
// writes are what the kernel would show. This host's hierarchy may be v1,
// so v2's paths are tried here.
func fakeV2(t *testing.T, files map[string]string) *Group {
	t.Helper()
	root := t.TempDir()
	path := PathOf("fake")
	dir := filepath.Join(root, path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m, err := cgroup2.Load(path, cgroup2.WithMountpoint(root))
	if err != nil {
		t.Fatal(err)
	}
	return &Group{path: path, root: root, v2: m}
}

// A v2 group whose counters cannot be read (gone, or without its memory
// controller) must fail Stats, as on v1: zeros would pass an OOM kill for
// the program's own exit. memory.peak is Linux 5.19's: an older kernel
// still gives the rest.
func TestStatsV2FailsWithoutCounters(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"no memory.events": {"cpu.stat": "usage_usec 5\n"},
		"no cpu.stat":      {"memory.events": "max 0\noom 0\noom_kill 0\n"},
	} {
		if _, err := fakeV2(t, files).Stats(); err == nil {
			t.Errorf("%s: Stats read zeros without an error", name)
		}
	}
	g := fakeV2(t, map[string]string{
		"memory.events": "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
		"cpu.stat":      "usage_usec 2500\nuser_usec 2000\n",
		"pids.events":   "max 2\n",
	})
	s, err := g.Stats()
	if err != nil {
		t.Fatalf("without memory.peak: %v", err)
	}
	want := Stats{CPU: 2500 * time.Microsecond, OOMKills: 1, MemoryLimitHits: 3, PidsLimitHits: 2}
	if s != want {
		t.Errorf("Stats = %+v; want %+v", s, want)
	}
}

// With memory_localevents a kill in a child group the runtime made and
// removed (runc's, a docker container's) is not counted in airlock's
// group; the OOM at airlock's limit, which led to it, is.
func TestStatsV2LocalEventsCountsOOMAtTheLimit(t *testing.T) {
	g := fakeV2(t, map[string]string{
		"memory.events": "low 0\nhigh 0\nmax 7\noom 1\noom_kill 0\n",
		"cpu.stat":      "usage_usec 1\n",
	})
	s, err := g.stats(true)
	if err != nil {
		t.Fatal(err)
	}
	if s.OOMKills == 0 {
		t.Errorf("Stats = %+v; want the OOM at the group's limit counted as a kill", s)
	}
}

func TestLocalEvents(t *testing.T) {
	const mi = `22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw
30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_localevents
31 22 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
`
	if !localEvents([]byte(mi), "/sys/fs/cgroup") {
		t.Error("memory_localevents at /sys/fs/cgroup not seen")
	}
	if localEvents([]byte(mi), "/sys/fs/cgroup/unified") {
		t.Error("memory_localevents seen on a mount without it")
	}
}
