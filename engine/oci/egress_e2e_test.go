//go:build e2e

package oci

import (
	"bytes"
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/e2etest"
	"github.com/airlock-sandbox/airlock/internal/netns"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/lifecycle"
)

func egressPolicy(t *testing.T, mode isolation.Mode, allow ...string) isolation.Policy {
	t.Helper()
	p := isolation.Default()
	p.Isolation = mode
	p.Seccomp = profile(t, mode)
	var err error
	if p.Egress.Allow, err = egress.ParseAllowlist(allow); err != nil {
		t.Fatal(err)
	}
	return p
}

// netnsLeft adds sandbox id's egress namespaces to leftovers.
func netnsLeft(t *testing.T, e *Engine, id string) []string {
	t.Helper()
	left := leftovers(t, e, id)
	for _, p := range []string{netns.At(e.netnsDir(), id).SandboxPath(), netns.At(e.netnsDir(), id).ProxyPath()} {
		if _, err := os.Lstat(p); err == nil {
			left = append(left, p)
		}
	}
	return left
}

// A long-lived sandbox's proxy is its supervisor's (Serve): served, an
// exec's busybox wget gets the upstream's answer through it and the
// audit log has the record; not served, Create fails once it has waited
// for it, and leaves nothing, its namespaces included.
func TestSandboxEgress(t *testing.T) {
	root, image := testRoot(t)
	up := e2etest.Upstream(t, "through the proxy")
	for _, mode := range []isolation.Mode{isolation.GVisor, isolation.Seccomp} {
		t.Run(string(mode), func(t *testing.T) {
			e, err := New(root)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			id := "egress-" + string(mode)
			sctx, stop := context.WithCancel(ctx)
			served := make(chan error, 1)
			go func() {
				// As the supervisor does: Serve once the sandbox opens.
				for {
					sb, err := e.Open(sctx, id)
					if err == nil {
						served <- sb.(engine.Server).Serve(sctx)
						return
					}
					select {
					case <-sctx.Done():
						served <- nil
						return
					case <-time.After(10 * time.Millisecond):
					}
				}
			}()
			sb, err := e.Create(ctx, &engine.SandboxSpec{ID: id, Image: image, Policy: egressPolicy(t, mode, up)})
			if err != nil {
				stop()
				t.Fatal(err)
			}
			var out, errb bytes.Buffer
			exit, err := sb.Exec(ctx, &engine.Process{Argv: []string{"wget", "-q", "-O", "-", "http://" + up + "/"}, Stdout: &out, Stderr: &errb})
			if err != nil || exit.Code != 0 || out.String() != "through the proxy" {
				t.Errorf("wget through the proxy: %v, exit %d, %q, %q", err, exit.Code, out.String(), errb.String())
			}
			if err := sb.Destroy(ctx); err != nil {
				t.Fatal(err)
			}
			stop()
			if err := <-served; err != nil {
				t.Errorf("Serve: %v", err)
			}
			if left := netnsLeft(t, e, id); len(left) > 0 {
				t.Errorf("left after destroy: %v", left)
			}
			b, _ := os.ReadFile(lifecycle.AuditPath(root))
			if !strings.Contains(string(b), `"sandbox_id":"`+id+`"`) || !strings.Contains(string(b), `"status":200`) {
				t.Errorf("no egress record of %s in the audit log:\n%s", id, b)
			}

			// Nothing serves this one's proxy.
			id += "-unserved"
			start := time.Now()
			_, err = e.Create(ctx, &engine.SandboxSpec{ID: id, Image: image, Policy: egressPolicy(t, mode, up)})
			if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "supervisor") {
				t.Errorf("Create with no proxy served: %v; want unavailable, naming the supervisor", err)
			}
			if took := time.Since(start); took < proxyWait {
				t.Errorf("Create gave up after %v, before %v", took, proxyWait)
			}
			if left := netnsLeft(t, e, id); len(left) > 0 {
				t.Errorf("left after a failed create: %v", left)
			}
		})
	}
}

// A one-shot sandbox's proxy is this process's, for the sandbox's life:
// the program reaches the upstream through it, and an audit log that
// cannot be written stops it and fails the destroy, so no connection
// goes unrecorded without an error.
func TestSandboxEgressRunAuditFails(t *testing.T) {
	root, image := testRoot(t)
	up := e2etest.Upstream(t, "through the proxy")
	e, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	// A directory where the audit log belongs cannot be appended to.
	if err := os.Mkdir(lifecycle.AuditPath(root), 0o700); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const id = "egress-audit-fails"
	var out, errb bytes.Buffer
	p := egressPolicy(t, isolation.GVisor, up)
	p.Limits.Timeout = 60 * time.Second
	task, err := e.Run(ctx, &engine.SandboxSpec{ID: id, Image: image, Policy: p, Init: &engine.Process{
		Argv: []string{"sh", "-c", "wget -q -O - http://" + up + "/; echo; wget -q -T 5 -O - http://" + up + "/ || echo second refused"}, Stdout: &out, Stderr: &errb,
	}})
	if err != nil {
		t.Fatal(err)
	}
	exit, err := task.Wait(ctx)
	if err != nil || exit.Code != 0 {
		t.Errorf("Wait: %v, exit %d, stderr %q", err, exit.Code, errb.String())
	}
	if got := out.String(); !strings.HasPrefix(got, "through the proxy\n") || !strings.Contains(got, "second refused") {
		t.Errorf("the program printed %q; want the first answer, then the second refused", got)
	}
	err = task.Destroy(ctx)
	var ae *lifecycle.AuditError
	if !errdefs.IsUnavailable(err) || !errors.As(err, &ae) {
		t.Errorf("Destroy: %v; want the audit log's error", err)
	}
	if left := netnsLeft(t, e, id); len(left) > 0 {
		t.Errorf("left after destroy: %v", left)
	}
}

// A held sandbox (a warm pool's) with egress has its proxy from Hold,
// before its program is known, to Destroy.
func TestSandboxEgressHeld(t *testing.T) {
	root, image := testRoot(t)
	up := e2etest.Upstream(t, "through the proxy")
	e, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const id = "egress-held"
	h, err := e.Hold(ctx, &engine.SandboxSpec{ID: id, Image: image, Policy: egressPolicy(t, isolation.GVisor, up)})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	task, err := h.Start(ctx, &engine.Process{Argv: []string{"wget", "-q", "-O", "-", "http://" + up + "/"}, Stdout: &out, Stderr: &errb})
	if err != nil {
		h.Destroy(ctx)
		t.Fatal(err)
	}
	exit, err := task.Wait(ctx)
	if err != nil || exit.Code != 0 || out.String() != "through the proxy" {
		t.Errorf("wget through a held sandbox's proxy: %v, exit %d, %q, %q", err, exit.Code, out.String(), errb.String())
	}
	if err := task.Destroy(ctx); err != nil {
		t.Fatal(err)
	}
	if left := netnsLeft(t, e, id); len(left) > 0 {
		t.Errorf("left after destroy: %v", left)
	}
}
