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

// A warm pool, of runs or of long-lived sandboxes, closed while its
// sandboxes boot, as serve closes its pools
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
	for _, kind := range []string{"runs", "sandboxes"} {
		for i := range 8 {
			var p *runner.Pool
			var err error
			o := runner.PoolOptions{Name: "close", Size: 2}
			if kind == "runs" {
				p, err = r.NewPool(ctx, runner.Spec{Image: busybox, Policy: pol}, o)
			} else {
				p, err = r.NewSandboxPool(ctx, runner.SandboxSpec{Image: busybox, Policy: pol}, o)
			}
			if err != nil {
				t.Fatal(err)
			}
			after := time.Duration(i) * 40 * time.Millisecond
			time.Sleep(after)
			if err := p.Close(ctx); err != nil {
				t.Fatal(err)
			}
			if left := sandboxes(); len(left) > 0 {
				t.Fatalf("a pool of %s closed %v after its start: left %v", kind, after, left)
			}
			if runs, _ := os.ReadDir(filepath.Join(rootDir, "runs")); len(runs) > 0 {
				t.Fatalf("a pool of %s closed %v after its start: %d run directories left", kind, after, len(runs))
			}
			if sbs, err := r.Sandboxes(ctx); err != nil || len(sbs) > 0 {
				t.Fatalf("a pool of %s closed %v after its start: sandboxes %v left (%v)", kind, after, sbs, err)
			}
		}
	}
}
