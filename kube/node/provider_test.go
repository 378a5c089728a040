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
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/airlock-sandbox/airlock/engine"
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
	dir := t.TempDir()
	logs, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer logs.Close()
	log := filepath.Join(dir, "uid.log")
	p := &Provider{logs: logs, pods: map[string]*pod{"ns/p": {obj: &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}, log: "uid.log"}}}
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

// TestPodLog: the program's output is the pod's log, which kubectl logs
// reads and the pod's deletion removes.
func TestPodLog(t *testing.T) {
	fe := &fakeEngine{}
	wrote := make(chan struct{})
	fe.exec = func(ctx context.Context, pr *engine.Process) (engine.Exit, error) {
		pr.Stdout.Write([]byte("hello\n"))
		close(wrote)
		<-ctx.Done()
		return engine.Exit{Code: 137}, nil
	}
	p, _, logs := fakeProvider(t, fe)
	pod := renderedPod(t, "uid-1")
	ctx := context.Background()
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	<-wrote
	rc, err := p.GetContainerLogs(ctx, "ns", "p", pod.Spec.Containers[0].Name, api.ContainerLogOpts{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || string(b) != "hello\n" {
		t.Errorf("kubectl logs: %q, %v", b, err)
	}
	if err := p.DeletePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(logs); len(ents) != 0 {
		t.Errorf("the deleted pod's log is left: %v", ents)
	}
}

// TestHostileUIDTouchesNoFile: a pod's UID is the API server's word, and
// names its log file. One that climbs out of the logs directory is
// refused, and nothing outside the directory is written or, on the pod's
// deletion, removed.
func TestHostileUIDTouchesNoFile(t *testing.T) {
	fe := &fakeEngine{}
	fe.exec = func(ctx context.Context, pr *engine.Process) (engine.Exit, error) {
		pr.Stdout.Write([]byte("written by the pod's program\n"))
		<-ctx.Done()
		return engine.Exit{Code: 137}, nil
	}
	p, root, logs := fakeProvider(t, fe)
	// A file of the host's outside the logs directory, named *.log.
	victim := filepath.Join(root, "victim.log")
	if err := os.WriteFile(victim, []byte("the host's own data\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(logs, filepath.Join(root, "victim"))
	if err != nil {
		t.Fatal(err)
	}
	pod := renderedPod(t, rel)
	ctx := context.Background()
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	got, _ := p.GetPod(ctx, "ns", "p")
	if got.Status.Phase != corev1.PodFailed || !strings.HasPrefix(got.Status.Message, "metadata.uid:") {
		t.Errorf("UID %q: pod %s, %q; want it refused for metadata.uid", pod.UID, got.Status.Phase, got.Status.Message)
	}
	if n := fe.sandboxes(); n != 0 {
		t.Errorf("UID %q: %d sandboxes made", pod.UID, n)
	}
	if err := p.DeletePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "the host's own data\n" {
		t.Errorf("UID %q: %s, outside the logs directory, now holds %q (%v)", pod.UID, victim, b, err)
	}
}

// TestOpenLogStaysInDirectory: the log is made in the logs directory
// whatever is there: a link planted under its name is replaced, never
// followed, and a name that would leave the directory is an error.
func TestOpenLogStaysInDirectory(t *testing.T) {
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs")
	if err := os.Mkdir(logs, 0o700); err != nil {
		t.Fatal(err)
	}
	root, err := os.OpenRoot(logs)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	p := &Provider{logs: root, log: slog.New(slog.DiscardHandler)}
	victim, inside := filepath.Join(dir, "victim"), filepath.Join(logs, "inside")
	for _, f := range []string{victim, inside} {
		if err := os.WriteFile(f, []byte("kept"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Links out of the directory, absolute and relative, and one to a file
	// in it: none is followed.
	for _, link := range []string{victim, "../victim", "inside"} {
		if err := os.Symlink(link, filepath.Join(logs, "uid.log")); err != nil {
			t.Fatal(err)
		}
		f, err := p.openLog("uid.log")
		if err != nil {
			t.Fatalf("a link %q under the log's name: %v", link, err)
		}
		f.Write([]byte("the pod's output"))
		f.Close()
		fi, err := os.Lstat(filepath.Join(logs, "uid.log"))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() {
			t.Errorf("a link %q under the log's name: the log is %v; want a regular file", link, fi.Mode())
		}
		for _, f := range []string{victim, inside} {
			if b, _ := os.ReadFile(f); string(b) != "kept" {
				t.Errorf("a link %q under the log's name: %s holds %q", link, f, b)
			}
		}
		os.Remove(filepath.Join(logs, "uid.log"))
	}
	if f, err := p.openLog("../victim"); err == nil {
		f.Close()
		t.Error("a log name that leaves the directory was opened")
	}
	if b, _ := os.ReadFile(victim); string(b) != "kept" {
		t.Errorf("%s holds %q", victim, b)
	}
}

// TestDeleteWhileCreatingRemovesLog: a pod deleted while its sandbox is
// made has its sandbox ended once made, and its log, made after the
// deletion dropped the pod, removed: nothing is left of it.
func TestDeleteWhileCreatingRemovesLog(t *testing.T) {
	fe := &fakeEngine{createGate: make(chan struct{}), creating: make(chan struct{})}
	p, _, logs := fakeProvider(t, fe)
	pod := renderedPod(t, "uid-1")
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- p.CreatePod(ctx, pod) }()
	<-fe.creating
	if err := p.DeletePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	close(fe.createGate)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := fe.sandboxes(); n != 0 {
		t.Errorf("%d sandboxes left after the pod's deletion", n)
	}
	if got, _ := p.GetPod(ctx, "ns", "p"); got != nil {
		t.Errorf("the node still holds the deleted pod")
	}
	ents, _ := os.ReadDir(logs)
	for _, e := range ents {
		t.Errorf("log %s left in %s after the pod was deleted", e.Name(), logs)
	}
}

// TestExecHoldsNoOutput: a kubectl exec's output streams to its client,
// and only its exit code is used: the node holds no more of it than a
// small head and tail, whatever the pod's output cap.
func TestExecHoldsNoOutput(t *testing.T) {
	const per = 16 << 20 // each exec's output
	const n = 4
	fe := &fakeEngine{}
	p, _, _ := fakeProvider(t, fe)
	pod := renderedPod(t, "uid-1")
	pod.Annotations["airlock.dev/output-limit"] = "64MiB"
	ctx := context.Background()
	if err := p.CreatePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	defer p.DeletePod(ctx, pod)
	if got, _ := p.GetPod(ctx, "ns", "p"); got.Status.Phase != corev1.PodRunning {
		t.Fatalf("pod %s: %s", got.Status.Phase, got.Status.Message)
	}
	// The pod's own program (sleep) waits for the pod's end; each kubectl
	// exec writes its output, then waits until the heap is measured.
	release := make(chan struct{})
	var wrote sync.WaitGroup
	wrote.Add(n)
	chunk := make([]byte, 1<<20)
	fe.setExec(func(ctx context.Context, pr *engine.Process) (engine.Exit, error) {
		if pr.Argv[0] == "sleep" { // the pod's program, started meanwhile
			<-ctx.Done()
			return engine.Exit{Code: 137}, nil
		}
		for i := 0; i < per/len(chunk); i++ {
			pr.Stdout.Write(chunk)
		}
		wrote.Done()
		<-release
		return engine.Exit{}, nil
	})
	before := heapAlloc()
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			errs <- p.RunInContainer(ctx, "ns", "p", pod.Spec.Containers[0].Name, []string{"yes"}, discardAttach{})
		}()
	}
	wrote.Wait()
	grown := int64(heapAlloc()) - int64(before)
	close(release)
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Errorf("exec: %v", err)
		}
	}
	if grown > n*per/2 {
		t.Errorf("%d kubectl execs, each streaming %d MiB to its client: the node's heap grew %d MiB", n, per>>20, grown>>20)
	}
}

// heapAlloc is the heap in use after a collection.
func heapAlloc() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// discardAttach is a kubectl exec with no stdin and no terminal, whose
// output goes nowhere.
type discardAttach struct{}

func (discardAttach) Stdin() io.Reader            { return nil }
func (discardAttach) Stdout() io.WriteCloser      { return nopWriteCloser{} }
func (discardAttach) Stderr() io.WriteCloser      { return nopWriteCloser{} }
func (discardAttach) TTY() bool                   { return false }
func (discardAttach) Resize() <-chan api.TermSize { return nil }

type nopWriteCloser struct{}

func (nopWriteCloser) Write(b []byte) (int, error) { return len(b), nil }
func (nopWriteCloser) Close() error                { return nil }

// A new provider removes the logs its node's last process left: their
// pods fail unserved, and nothing else would ever remove them.
func TestNewProviderRemovesLastLogs(t *testing.T) {
	fe := &fakeEngine{}
	p, root, logs := fakeProvider(t, fe)
	left := filepath.Join(logs, "0b3f6c1e-5d7a-4c2b-9e8f-1a2b3c4d5e6f.log")
	if err := os.WriteFile(left, []byte("the last process's pod\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, profile := rendered(t)
	if _, err := NewProvider(context.Background(), ProviderConfig{Service: p.svc, Node: "n", Profile: profile,
		Logs: logs, Log: slog.New(slog.DiscardHandler)}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the last process's log is still there: %v (root %s)", err, root)
	}
}

// A UID names its pod's log: a second pod of a UID held here (a hostile
// or broken API server) is refused, and the first pod's log is its own.
func TestPodOfAHeldUIDRefused(t *testing.T) {
	fe := &fakeEngine{}
	fe.exec = func(ctx context.Context, pr *engine.Process) (engine.Exit, error) {
		pr.Stdout.Write([]byte("the first pod's\n"))
		<-ctx.Done()
		return engine.Exit{Code: 137}, nil
	}
	p, _, _ := fakeProvider(t, fe)
	ctx := context.Background()
	first := renderedPod(t, "0b3f6c1e-5d7a-4c2b-9e8f-1a2b3c4d5e6f")
	if err := p.CreatePod(ctx, first); err != nil {
		t.Fatal(err)
	}
	defer p.DeletePod(ctx, first)
	second := renderedPod(t, string(first.UID))
	second.Name = "q"
	if err := p.CreatePod(ctx, second); err != nil {
		t.Fatal(err)
	}
	got, _ := p.GetPod(ctx, "ns", "q")
	if got.Status.Phase != corev1.PodFailed || !strings.Contains(got.Status.Message, "ns/p has UID") {
		t.Errorf("a second pod of UID %s: %s, %q; want it refused naming the first", first.UID, got.Status.Phase, got.Status.Message)
	}
	if n := fe.sandboxes(); n != 1 {
		t.Errorf("%d sandboxes made; want the first pod's alone", n)
	}
	if err := p.DeletePod(ctx, second); err != nil {
		t.Fatal(err)
	}
	if got, _ := p.GetPod(ctx, "ns", "p"); got == nil || got.Status.Phase == corev1.PodFailed {
		t.Errorf("deleting the refused twin touched the first pod: %+v", got)
	}
}
