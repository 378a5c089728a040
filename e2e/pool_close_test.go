//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
)

// A warm pool closed while its sandboxes boot, as serve closes its pools
// on SIGTERM, leaves nothing of them, with no reap: no runtime container
// or runtime file (a `runsc run` killed as it began leaves its state
// lock), run directory, bundle or cgroup. The pool is closed at several
// points of its fills' boot.
func TestPoolClosedMidFill(t *testing.T) {
	onlyPair(t, "oci", "")
	r := apiRunner(t)
	pol := isolation.Default()
	pol.Isolation = isolation.Mode(isolationName)
	ctx := context.Background()
	for i := range 8 {
		p, err := r.NewPool(ctx, runner.Spec{Image: busybox, Policy: pol}, runner.PoolOptions{Name: "close", Size: 2})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(i) * 40 * time.Millisecond)
		if err := p.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if left := sandboxes(); len(left) > 0 {
			t.Fatalf("closed %v after the pool's start: left %v", time.Duration(i)*40*time.Millisecond, left)
		}
		if runs, _ := os.ReadDir(filepath.Join(rootDir, "runs")); len(runs) > 0 {
			t.Fatalf("closed %v after the pool's start: %d run directories left", time.Duration(i)*40*time.Millisecond, len(runs))
		}
	}
}
