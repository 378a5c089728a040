package oci

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/cgroup"
)

// A sandbox's OOM kills are counted wherever the kernel puts them: v1 in
// the victim's group, summed below the sandbox's; v2 in the sandbox's
// group for its subtree, or, under memory_localevents, only in the
// victim's (runc's child), which the .local files count either way.
func TestCgroupCountFindsKillsBelow(t *testing.T) {
	const id = "sb-count"
	write := func(t *testing.T, base, rel, body string) {
		t.Helper()
		p := filepath.Join(base, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	group := filepath.Join(cgroup.Parent, id)
	for _, c := range []struct {
		name  string
		files map[string]string
		want  uint64
	}{
		{"v1, the kill in runc's child", map[string]string{
			filepath.Join("memory", group, "memory.oom_control"):        "oom_kill_disable 0\noom_kill 0\n",
			filepath.Join("memory", group, "ctr", "memory.oom_control"): "oom_kill_disable 0\noom_kill 1\n",
		}, 1},
		{"v2, hierarchical events, no .local files", map[string]string{
			filepath.Join(group, "memory.events"):        "oom 1\noom_kill 1\n",
			filepath.Join(group, "ctr", "memory.events"): "oom 0\noom_kill 1\n",
		}, 1},
		{"v2, memory_localevents: only the child counted the kill", map[string]string{
			filepath.Join(group, "memory.events"):              "oom 1\noom_kill 0\n",
			filepath.Join(group, "memory.events.local"):        "oom 1\noom_kill 0\n",
			filepath.Join(group, "ctr", "memory.events"):       "oom 0\noom_kill 1\n",
			filepath.Join(group, "ctr", "memory.events.local"): "oom 0\noom_kill 1\n",
		}, 1},
		{"v2, two kills counted up the tree", map[string]string{
			filepath.Join(group, "memory.events"):              "oom_kill 2\n",
			filepath.Join(group, "memory.events.local"):        "oom_kill 1\n",
			filepath.Join(group, "ctr", "memory.events"):       "oom_kill 1\n",
			filepath.Join(group, "ctr", "memory.events.local"): "oom_kill 1\n",
		}, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			base := t.TempDir()
			for rel, body := range c.files {
				write(t, base, rel, body)
			}
			if got := cgroupCount(base, id, "memory", "memory.oom_control", "memory.events", "oom_kill"); got != c.want {
				t.Errorf("counted %d OOM kills, want %d", got, c.want)
			}
		})
	}
}
