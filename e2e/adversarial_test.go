//go:build e2e

package e2e

import (
	"os"
	"testing"
	"strconv"
	"net"
	"path/filepath"
)

func TestAdversarialExplore(t *testing.T) {
	script, _ := os.ReadFile("testdata/adversarial/probe.py")
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	ab, _ := net.Listen("unix", "@airlock-e2e-probe")
	defer ab.Close()
	dir := t.TempDir()
	us, _ := net.Listen("unix", filepath.Join(dir, "host.sock"))
	defer us.Close()
	os.WriteFile(filepath.Join(dir, "secret"), []byte("x"), 0o644)
	res, c := runJSON(t, []string{"AIRLOCK_E2E_SECRET=hunter2"}, "--env", "GIVEN=yes", "--timeout", "30s", "--", "python3", "-c", string(script),
		strconv.Itoa(ln.Addr().(*net.TCPAddr).Port), "airlock-e2e-probe", filepath.Join(dir, "host.sock"), strconv.Itoa(os.Getpid()), filepath.Join(dir, "secret"), "47001")
	t.Logf("reason %s exit %d wall %v\n%s\n%s", res.Reason, res.ExitCode, c.wall, res.Stdout.Head, res.Stderr.Head)
}
