package docker

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/isolation"
)

// A dockerd whose info says it cannot apply one of airlock's limits would
// drop it from every container with only a warning: Check (and so
// `airlock doctor`) refuses it, naming the fact and the fix, and no run or
// sandbox is created on it, whatever Check said before.
func TestDaemonWithoutLimitsRefused(t *testing.T) {
	for _, fact := range []struct{ field, json, fix string }{
		{"MemoryLimit", "MemoryLimit", "cgroup_enable=memory"},
		{"SwapLimit", "SwapLimit", "swapaccount=1"},
		{"PidsLimit", "PidsLimit", "CONFIG_CGROUP_PIDS"},
		{"CPUCfsQuota", "CpuCfsQuota", "CONFIG_CFS_BANDWIDTH"},
	} {
		t.Run(fact.field, func(t *testing.T) {
			info := maps.Clone(goodInfo)
			info[fact.json] = false
			f, e := startFake(t, map[string]http.HandlerFunc{
				"GET /info":               jsonReply(info),
				"POST /containers/create": hang,
			})
			want := func(what string, err error) {
				t.Helper()
				if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), fact.field) ||
					!strings.Contains(err.Error(), fact.fix) || !strings.Contains(err.Error(), "--engine oci") {
					t.Errorf("%s: %v; want unavailable, naming %s, %s and --engine oci", what, err, fact.field, fact.fix)
				}
			}
			for _, m := range []isolation.Mode{isolation.GVisor, isolation.Seccomp} {
				err := e.Check(context.Background(), fakeJob(t, m))
				want("Check "+string(m), err)
				// doctor shows the error's own fix.
				var fixer interface{ Fix() string }
				if !errors.As(err, &fixer) || !strings.Contains(fixer.Fix(), fact.fix) {
					t.Errorf("Check %s: %v has no Fix naming %s", m, err, fact.fix)
				}
				want("Run "+string(m), runWithin(t, e, m, 10*time.Second))
			}
			if runtime.GOARCH == "amd64" {
				sb, err := e.Create(context.Background(), sandboxJob(t))
				if err == nil {
					sb.Destroy(context.Background())
				}
				want("Create", err)
			}
			if f.called("POST /containers/create") {
				t.Errorf("a container was created on a dockerd without %s", fact.field)
			}
		})
	}
}

// dockerd drops a limit it cannot apply from the container it creates and
// says so only in create's Warnings (moby's
// verifyPlatformContainerResources), even when its info said otherwise.
// Runs, sandboxes and the pools made of them refuse such a container:
// removed, never started, with the warnings quoted in the error.
func TestCreateWarningsRefused(t *testing.T) {
	const cid = "c0ffee"
	warnings := []string{
		"Your kernel does not support memory limit capabilities or the cgroup is not mounted. Limitation discarded.",
		"Your kernel does not support PIDs limit capabilities or the cgroup is not mounted. PIDs limit discarded.\x1b[2J\u009b31m",
	}
	for _, path := range []string{"run", "sandbox"} {
		t.Run(path, func(t *testing.T) {
			if path == "sandbox" && runtime.GOARCH != "amd64" {
				t.Skip("long-lived sandboxes on the docker engine are amd64 only")
			}
			f, e := startFake(t, map[string]http.HandlerFunc{
				"GET /info":                           jsonReply(goodInfo),
				"POST /containers/create":             jsonReply(map[string]any{"Id": cid, "Warnings": warnings}),
				"GET /events":                         stream,
				"POST /containers/" + cid + "/attach": hijackAttach,
				"POST /containers/" + cid + "/wait":   stream,
				"POST /containers/" + cid + "/start":  func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) },
				"DELETE /containers/" + cid:           func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusNoContent) },
			})
			var sb interface{ Destroy(context.Context) error }
			var err error
			if path == "run" {
				sb, err = e.Run(context.Background(), fakeJob(t, isolation.GVisor))
			} else {
				sb, err = e.Create(context.Background(), sandboxJob(t))
			}
			if err == nil {
				sb.Destroy(context.Background())
			}
			if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "Limitation discarded") || !strings.Contains(err.Error(), "PIDs limit discarded") {
				t.Errorf("error %v; want unavailable, quoting dockerd's warnings", err)
			}
			if err != nil && (strings.ContainsAny(err.Error(), "\x1b\u009b") || !strings.Contains(err.Error(), `\x1b[2J\u009b31m`)) {
				t.Errorf("error %q; want the warnings' control characters escaped", err)
			}
			if f.called("POST /containers/" + cid + "/start") {
				t.Error("the container was started although dockerd said it dropped limits")
			}
			if !f.called("DELETE /containers/" + cid) {
				t.Errorf("calls %v; want the container removed", f.calls)
			}
		})
	}
}

// sandboxJob is fakeJob as a long-lived sandbox.
func sandboxJob(t *testing.T) *engine.SandboxSpec {
	s := fakeJob(t, isolation.GVisor)
	s.Init = nil
	return s
}
