package docker

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/isolation"
)

// A root's engine runs gVisor under the runtime it registered, and reads
// its sandbox logs from that runtime's flags, whatever airlock-runsc is.
func TestEngineRunsUnderItsRootsRuntime(t *testing.T) {
	root := t.TempDir()
	info := map[string]any{
		"CgroupDriver": "systemd",
		"MemoryLimit":  true, "SwapLimit": true, "PidsLimit": true, "CpuCfsQuota": true,
		"Runtimes": map[string]any{
			"airlock-runsc":      goodInfo["Runtimes"].(map[string]any)["airlock-runsc"],
			"airlock-runsc-mine": map[string]any{"path": root + "/tools/runsc", "runtimeArgs": []string{"--network=none", "--oci-seccomp", "--debug-log=" + root + "/sandbox-logs/%ID%/", "--debug-command=boot"}},
		},
	}
	var mu sync.Mutex
	var created []string
	f, e := startFake(t, map[string]http.HandlerFunc{
		"GET /info": jsonReply(info),
		"POST /containers/create": func(w http.ResponseWriter, r *http.Request) {
			var body struct{ HostConfig struct{ Runtime string } }
			json.NewDecoder(r.Body).Decode(&body)
			mu.Lock()
			created = append(created, body.HostConfig.Runtime)
			mu.Unlock()
			http.Error(w, `{"message":"no"}`, http.StatusBadRequest)
		},
	})
	e.gvisor = "airlock-runsc-mine"
	if _, err := e.CheckRuntime(context.Background(), isolation.GVisor); err != nil {
		t.Fatal(err)
	}
	for _, m := range []isolation.Mode{isolation.GVisor, isolation.Seccomp} {
		runWithin(t, e, m, 10*time.Second)
	}
	mu.Lock()
	defer mu.Unlock()
	if !f.called("POST /containers/create") || len(created) != 2 || created[0] != "airlock-runsc-mine" || created[1] != "runc" {
		t.Errorf("created under runtimes %q, want airlock-runsc-mine, then runc", created)
	}
	if got := e.daemon.Load().sandboxLogDir("c1"); got != root+"/sandbox-logs/c1/" {
		t.Errorf("sandbox log dir %q, want the root's own", got)
	}
	if fi, err := os.Stat(filepath.Join(root, "sandbox-logs")); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("sandbox-logs: %v, %v; want a directory of mode 0700", fi, err)
	}
	rt, err := e.Runtime(context.Background(), isolation.GVisor)
	if rt.Name != "airlock-runsc-mine" {
		t.Errorf("Runtime = %+v, %v; want the root's name", rt, err)
	}

	// Its name not registered: refused, though airlock-runsc is.
	e.gvisor = "airlock-runsc-gone"
	if _, err := e.CheckRuntime(context.Background(), isolation.GVisor); !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "airlock-runsc-gone") {
		t.Errorf("CheckRuntime with the root's runtime missing: %v", err)
	}
}
