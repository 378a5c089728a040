//go:build e2e

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/service"
)

// A template that changes as the server stops gets no new pool once the
// pools are closed: a refresh after ClosePools (the server's ticker
// firing as it returns) makes none, so no fill outlives the server.
func TestPoolsStayClosed(t *testing.T) {
	onlyPair(t, "oci", "")
	const name = "stay-closed"
	create := func(memory string) {
		t.Helper()
		if c := airlock(nil, "template", "create", name, "--replace", "--engine", "oci", "--isolation", isolationName, "--image", busybox, "--memory", memory); c.code != 0 {
			t.Fatalf("template create: %d %s", c.code, c.stderr)
		}
	}
	create("256MiB")
	t.Cleanup(func() { airlock(nil, "template", "rm", name) })
	r := apiRunner(t)
	ctx := context.Background()
	svc := service.New(rootDir, fuzztest.Engines(r), service.WithPools([]service.PoolConfig{{Template: name, Size: 1}}, service.PoolOptions{}))
	if err := svc.StartPools(ctx); err != nil {
		t.Fatal(err)
	}
	closed := svc.Pool(name, false, r)
	if closed == nil {
		t.Fatal("no pool after StartPools")
	}
	svc.ClosePools()
	create("128MiB")
	svc.RefreshPools(ctx)
	if p := svc.Pool(name, false, r); p != closed {
		p.Close(ctx)
		t.Fatal("a refresh after ClosePools made a new pool for the changed template")
	}
	if err := svc.StartPools(ctx); err == nil {
		t.Error("StartPools after ClosePools started pools again")
	}
	if left := sandboxes(); len(left) > 0 {
		t.Errorf("left after the pools closed: %v", left)
	}
	if runs, _ := os.ReadDir(filepath.Join(rootDir, "runs")); len(runs) > 0 {
		t.Errorf("%d run directories left after the pools closed", len(runs))
	}
}

// A template removed while its pool serves retires the pool at the next
// refresh: nothing of the old version is handed out, and its sandboxes
// are destroyed.
func TestPoolsRetireRemovedTemplate(t *testing.T) {
	onlyPair(t, "oci", "")
	const name = "retire-removed"
	if c := airlock(nil, "template", "create", name, "--replace", "--engine", "oci", "--isolation", isolationName, "--image", busybox); c.code != 0 {
		t.Fatalf("template create: %d %s", c.code, c.stderr)
	}
	t.Cleanup(func() { airlock(nil, "template", "rm", name) })
	r := apiRunner(t)
	ctx := context.Background()
	svc := service.New(rootDir, fuzztest.Engines(r), service.WithPools([]service.PoolConfig{{Template: name, Size: 1}}, service.PoolOptions{}))
	if err := svc.StartPools(ctx); err != nil {
		t.Fatal(err)
	}
	defer svc.ClosePools()
	if svc.Pool(name, false, r) == nil {
		t.Fatal("no pool after StartPools")
	}
	if c := airlock(nil, "template", "rm", name); c.code != 0 {
		t.Fatalf("template rm: %d %s", c.code, c.stderr)
	}
	svc.RefreshPools(ctx)
	if p := svc.Pool(name, false, r); p != nil {
		t.Error("the pool of a removed template still serves after a refresh")
	}
	svc.ClosePools()
	if left := sandboxes(); len(left) > 0 {
		t.Errorf("left after the pool retired: %v", left)
	}
}
