//go:build e2e

package docker

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"testing"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/engine/enginetest"
	"github.com/airlock-sandbox/airlock/internal/cgroup"
	"github.com/airlock-sandbox/airlock/isolation"
)

// TestSandboxConformance runs the engines' shared suite on dockerd, in
// both isolation modes.
func TestSandboxConformance(t *testing.T) {
	modes(t, func(t *testing.T, e *Engine, m isolation.Mode) {
		bb, _ := testImages(t, e)
		cid := func(t *testing.T, id string) string {
			t.Helper()
			list := sandboxContainers(t, e, id)
			if len(list) != 1 {
				t.Fatalf("sandbox %s has %d containers", id, len(list))
			}
			return list[0].ID
		}
		p := testPolicy(t, m)
		p.Limits.Memory = 128 << 20 // for OutOfMemory's sake
		// The containers killed from outside: runsc leaves their state in
		// dockerd's shim directory unless airlock removes it.
		killed := map[string]string{}
		enginetest.Sandboxes(t, func(t *testing.T) engine.Engine { return newTestEngine(t) }, bb, enginetest.Harness{
			Policy: p,
			// The container's pid is runsc's sandbox process under gVisor,
			// the init under runc.
			KillSandbox: func(t *testing.T, id string) {
				c, err := e.cli.ContainerInspect(context.Background(), cid(t, id))
				if err != nil {
					t.Fatal(err)
				}
				killed[id] = c.ID
				if err := syscall.Kill(c.State.Pid, syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			},
			Leftovers: func(t *testing.T, id string) []string {
				var left []string
				for _, c := range sandboxContainers(t, e, id) {
					left = append(left, "container "+c.ID)
				}
				if slices.Contains(cgroup.IDs(), id) {
					left = append(left, "cgroup "+id)
				}
				if c := killed[id]; c != "" {
					state, _ := filepath.Glob(filepath.Join(runscStates, c+"_sandbox:*"))
					left = append(left, state...)
				}
				return left
			},
			BareExec: func(id string) *exec.Cmd {
				list, _ := e.cli.ContainerList(context.Background(), containerByID(id))
				ref := id
				if len(list) == 1 {
					ref = list[0].ID
				}
				cmd := exec.Command("docker", "exec", "-u", "65534:65534", ref, "true")
				cmd.Env = os.Environ()
				return cmd
			},
		})
	})
}
