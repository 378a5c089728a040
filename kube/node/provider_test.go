package node

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/airlock-sandbox/airlock/engines"
	"github.com/airlock-sandbox/airlock/kube/cluster"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
)

// TestSameNameNewUID: a pod deleted and made again under its name before
// the node heard of the deletion is a new pod, whether it comes as a
// create or (the pod controller's way for a name its provider holds) an
// update: the node reports the new one, and deleting it leaves nothing.
func TestSameNameNewUID(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	p, err := NewProvider(ctx, ProviderConfig{Service: service.New(root, engines.New(root, engines.Shared())),
		Node: "n", Profile: "x", Logs: t.TempDir(), Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	// Each refused, with a refusal of its own: no sandbox is made.
	mk := func(uid string, mutate func(*corev1.Pod)) *corev1.Pod {
		pod, _ := rendered(t)
		pod.Namespace, pod.Name, pod.UID = "ns", "p", types.UID(uid)
		mutate(pod)
		return pod
	}
	a := mk("uid-a", func(p *corev1.Pod) { p.Spec.HostNetwork = true })
	b := mk("uid-b", func(p *corev1.Pod) { p.Spec.HostPID = true })
	c := mk("uid-c", func(p *corev1.Pod) { p.Spec.HostIPC = true })
	held := func(uid, field string) {
		t.Helper()
		got, _ := p.GetPod(ctx, "ns", "p")
		if got == nil || string(got.UID) != uid || !strings.Contains(got.Status.Message, field) {
			t.Fatalf("the node holds %v, want %s refused for %s", got, uid, field)
		}
	}
	p.CreatePod(ctx, a)
	held("uid-a", "spec.hostNetwork")
	if err := p.CreatePod(ctx, b); err != nil {
		t.Fatal(err)
	}
	held("uid-b", "spec.hostPID")
	if err := p.UpdatePod(ctx, c); err != nil {
		t.Fatal(err)
	}
	held("uid-c", "spec.hostIPC")
	// The same pod again changes nothing.
	if err := p.UpdatePod(ctx, c); err != nil {
		t.Fatal(err)
	}
	held("uid-c", "spec.hostIPC")
	if err := p.DeletePod(ctx, b); err != nil {
		t.Fatal(err)
	}
	held("uid-c", "spec.hostIPC")
	if err := p.DeletePod(ctx, c); err != nil {
		t.Fatal(err)
	}
	if got, _ := p.GetPod(ctx, "ns", "p"); got != nil {
		t.Errorf("deleting the pod held left %s", got.UID)
	}
}

// TestContainerLogs: the whole log, its last lines and its last bytes, as
// the kubelet gives them, read from the file.
func TestContainerLogs(t *testing.T) {
	log := filepath.Join(t.TempDir(), "uid.log")
	p := &Provider{pods: map[string]*pod{"ns/p": {obj: &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}, log: log}}}
	get := func(opts api.ContainerLogOpts) string {
		t.Helper()
		rc, err := p.GetContainerLogs(context.Background(), "ns", "p", "c", opts)
		if err != nil {
			t.Fatal(err)
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	os.WriteFile(log, []byte("one\ntwo\nthree\n"), 0o600)
	for _, c := range []struct {
		opts api.ContainerLogOpts
		want string
	}{
		{api.ContainerLogOpts{}, "one\ntwo\nthree\n"},
		{api.ContainerLogOpts{Tail: 1}, "three\n"},
		{api.ContainerLogOpts{Tail: 2}, "two\nthree\n"},
		{api.ContainerLogOpts{Tail: 9}, "one\ntwo\nthree\n"},
		{api.ContainerLogOpts{LimitBytes: 4}, "ree\n"},
		{api.ContainerLogOpts{Tail: 2, LimitBytes: 7}, "\nthree\n"},
	} {
		if got := get(c.opts); got != c.want {
			t.Errorf("%+v: %q, want %q", c.opts, got, c.want)
		}
	}
}

// TestTailStart: the last n lines found from the end agree with splitting
// the whole, across the reader's block boundaries.
func TestTailStart(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 300; i++ {
		var b []byte
		switch i % 3 {
		case 0: // short lines
			for j := rng.IntN(40); j > 0; j-- {
				b = append(b, strings.Repeat("x", rng.IntN(5))+"\n"...)
			}
		case 1: // lines longer than a block
			for j := rng.IntN(4); j > 0; j-- {
				b = append(b, strings.Repeat("y", rng.IntN(150<<10))+"\n"...)
			}
		default: // no final line break
			b = []byte(strings.Repeat("z\n", rng.IntN(10)) + "tail")
		}
		n := 1 + rng.IntN(12)
		got, err := tailStart(bytes.NewReader(b), int64(len(b)), n)
		if err != nil {
			t.Fatal(err)
		}
		lines := bytes.SplitAfter(b, []byte("\n"))
		if len(lines) > 0 && len(lines[len(lines)-1]) == 0 {
			lines = lines[:len(lines)-1]
		}
		want := bytes.Join(lines[max(0, len(lines)-n):], nil)
		if !bytes.Equal(b[got:], want) {
			t.Fatalf("case %d, %d lines of %d bytes: from %d, %d bytes; want the last %d", i, n, len(b), got, len(b)-int(got), len(want))
		}
	}
}

// TestResultMessage: a program's Result is given in its pod's status
// whatever its size, cut to fit (runner's Sandbox.FitResult, tested
// there) when it is too large; one still too large is an error, so the
// pod ends with the exec failed, never with its Result left out.
func TestResultMessage(t *testing.T) {
	big := runner.Result{ID: "ex-1", Reason: runner.ReasonExited, Stdout: runner.Stream{Head: bytes.Repeat([]byte("x"), cluster.MaxResultBytes)}}
	var asked int
	cut := func(r runner.Result, max int) (runner.Result, error) {
		asked = max
		r.Stdout.Head, r.Stdout.Truncated = r.Stdout.Head[:max/2], true
		return r, nil
	}
	msg, err := resultMessage(big, cut)
	if err != nil || asked != cluster.MaxResultBytes || len(msg) > cluster.MaxResultBytes || !strings.Contains(msg, `"truncated":true`) {
		t.Errorf("a Result too large: %d bytes, asked to fit %d, %v", len(msg), asked, err)
	}
	asIs := func(r runner.Result, _ int) (runner.Result, error) { return r, nil }
	if msg, err := resultMessage(big, asIs); err == nil || msg != "" {
		t.Errorf("a Result left too large: %d bytes given, %v", len(msg), err)
	}
	failed := func(r runner.Result, _ int) (runner.Result, error) { return r, errors.New("no key") }
	if _, err := resultMessage(big, failed); err == nil || !strings.Contains(err.Error(), "no key") {
		t.Errorf("a Result that could not be cut: %v", err)
	}
	small := runner.Result{ID: "ex-1", Reason: runner.ReasonExited}
	if msg, err := resultMessage(small, asIs); err != nil || !strings.Contains(msg, `"id":"ex-1"`) {
		t.Errorf("a small Result: %q, %v", msg, err)
	}
}
