package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	vknode "github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilexec "k8s.io/utils/exec"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/errkind"
	"github.com/airlock-sandbox/airlock/kube/cluster"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
)

// Pod status reasons of the node's own (cluster's, which clients read).
const (
	ReasonRefused       = cluster.ReasonRefused
	ReasonCreateFailed  = cluster.ReasonCreateFailed
	ReasonNodeRestarted = cluster.ReasonNodeRestarted
	ReasonDeleted       = cluster.ReasonDeleted
	ReasonNodeLost      = cluster.ReasonNodeLost
)

// Sandbox labels that tie a sandbox to its pod and node.
const (
	LabelNode = "k8s-node"
	LabelUID  = "k8s-uid"
)

// createTimeout bounds making one pod's sandbox.
const createTimeout = 2 * time.Minute

// execResultBytes is the most of each stream's head a kubectl exec's
// Result keeps (with its tail, at most 64KiB, its total and sha256). The
// output went to the client as it came and only the exit code is used,
// so the pod's output cap must not set what the node holds while the exec
// runs.
const execResultBytes = 4 << 10

// Provider runs the pods the cluster binds to one node as airlock
// sandboxes, through the service: a pod is one sandbox, its container's
// program one exec in it that lives as long as the pod. It is the
// virtual-kubelet pod lifecycle handler, and tells pod status changes
// through NotifyPods.
type Provider struct {
	svc     *service.Service
	engine  string
	node    string
	hostIP  string
	profile string
	// logs is the directory of the pods' logs; every file operation in it
	// goes through it, so that none leaves it.
	logs *os.Root
	log  *slog.Logger

	// runs are the pods' programs in progress (run), which Wait awaits.
	runs sync.WaitGroup

	mu     sync.Mutex
	pods   map[string]*pod // by namespace/name
	lost   map[string]bool // pod UIDs whose sandbox the node's last process left
	notify func(*corev1.Pod)
}

var (
	_ vknode.PodLifecycleHandler = (*Provider)(nil)
	_ vknode.PodNotifier         = (*Provider)(nil)
)

// pod is one pod the node was given, and what runs it.
type pod struct {
	obj     *corev1.Pod // its status is the node's word
	sandbox string
	// log is the name of the pod's log file in the logs directory, once
	// it is made.
	log       string
	execLimit time.Duration
	cancel    context.CancelFunc
	// ended: the pod was deleted, or the cluster ended it; its sandbox
	// must not live on.
	ended bool
	// result is the ended program's Result as JSON, for the pod's
	// cluster.ResultCondition; "" when there is none to give.
	result string
}

// ProviderConfig configures a Provider.
type ProviderConfig struct {
	Service *service.Service
	// Engine makes the sandboxes ("" is the service's).
	Engine string
	// Node is the node's name; HostIP its address, for pod status.
	Node, HostIP string
	// Profile is the sha256 of airlock's default seccomp profile.
	Profile string
	// Logs is the directory of the pods' program output.
	Logs string
	Log  *slog.Logger
}

// NewProvider returns a provider, after ending every sandbox the node's
// previous process left: its pods' programs are gone with it, and those
// pods fail rather than run a second time.
func NewProvider(ctx context.Context, c ProviderConfig) (*Provider, error) {
	if err := os.MkdirAll(c.Logs, 0o700); err != nil {
		return nil, fmt.Errorf("making the pods' log directory: %w", err)
	}
	logs, err := os.OpenRoot(c.Logs)
	if err != nil {
		return nil, fmt.Errorf("opening the pods' log directory: %w", err)
	}
	p := &Provider{svc: c.Service, engine: c.Engine, node: c.Node, hostIP: c.HostIP, profile: c.Profile, logs: logs,
		log: c.Log, pods: map[string]*pod{}, lost: map[string]bool{}, notify: func(*corev1.Pod) {}}
	all, err := p.svc.Sandboxes()
	if err != nil {
		return nil, err
	}
	for _, si := range all {
		if si.Labels[LabelNode] != c.Node {
			continue
		}
		p.lost[si.Labels[LabelUID]] = true
		if err := p.svc.Destroy(ctx, si.ID); err != nil {
			return nil, fmt.Errorf("ending sandbox %s, left by the node's last process: %w", si.ID, err)
		}
		p.log.Info("ended a sandbox the node's last process left", "sandbox", si.ID, "pod", si.Labels["k8s-namespace"]+"/"+si.Labels["k8s-pod"])
	}
	// The logs are the last process's pods', which fail unserved.
	if d, err := logs.Open("."); err == nil {
		names, _ := d.Readdirnames(-1)
		d.Close()
		for _, name := range names {
			if strings.HasSuffix(name, ".log") {
				p.removeLog("", name)
			}
		}
	}
	return p, nil
}

func key(ns, name string) string { return ns + "/" + name }

// NotifyPods registers the callback the pod controller takes status from.
func (p *Provider) NotifyPods(_ context.Context, cb func(*corev1.Pod)) {
	p.mu.Lock()
	p.notify = cb
	p.mu.Unlock()
}

// tell hands a copy of pd's pod to the pod controller; call with p.mu held.
func (p *Provider) tell(pd *pod) {
	cb, obj := p.notify, pd.obj.DeepCopy()
	go cb(obj)
}

// CreatePod admits the pod and starts its sandbox and program. A refusal
// or a failure to start is the pod's Failed status, not an error: the pod
// controller would otherwise try again, and a refused pod never runs.
func (p *Provider) CreatePod(ctx context.Context, in *corev1.Pod) error {
	k := key(in.Namespace, in.Name)
	pd := &pod{obj: in.DeepCopy()}
	now := metav1.Now()
	pd.obj.Status = corev1.PodStatus{Phase: corev1.PodPending, HostIP: p.hostIP, StartTime: &now}
	if p.hostIP != "" {
		// A sandbox has no address of its own (no network); its pod shows
		// its node's, as a hostNetwork pod does, since agent-sandbox holds
		// a claim until its pod has one. Nothing of the pod listens there.
		pd.obj.Status.HostIPs = []corev1.HostIP{{IP: p.hostIP}}
		pd.obj.Status.PodIP, pd.obj.Status.PodIPs = p.hostIP, []corev1.PodIP{{IP: p.hostIP}}
	}
	p.mu.Lock()
	if held, ok := p.pods[k]; ok {
		p.mu.Unlock()
		if held.obj.UID == in.UID {
			return nil
		}
		// The pod was deleted and made again under its name before this
		// node heard of the deletion: the one held ends, unseen.
		if _, err := p.drop(ctx, k, held); err != nil {
			return err
		}
		p.log.Info("pod replaced by one of the same name", "pod", k, "old_uid", held.obj.UID, "uid", in.UID)
		p.mu.Lock()
		if _, ok := p.pods[k]; ok {
			p.mu.Unlock()
			return nil
		}
	}
	// A UID names the pod's log: the API server gives each pod its own,
	// and a second pod under one held here is refused.
	twin := ""
	for ok, other := range p.pods {
		if other.obj.UID == in.UID {
			twin = ok
			break
		}
	}
	p.pods[k] = pd
	lost := p.lost[string(in.UID)]
	p.mu.Unlock()

	if twin != "" {
		return p.fail(pd, ReasonRefused, fmt.Sprintf("metadata.uid: pod %s has UID %q too; Kubernetes gives each pod a UID of its own", twin, in.UID))
	}
	if lost {
		return p.fail(pd, ReasonNodeRestarted, "the node restarted while this pod ran; its program is not started again")
	}
	w, err := Admit(in, p.profile)
	if err != nil {
		p.log.Info("pod refused", "pod", k, "error", err)
		return p.fail(pd, ReasonRefused, err.Error())
	}
	w.Sandbox.Labels[LabelNode] = p.node
	pd.execLimit = w.ExecTimeout
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), createTimeout)
	defer cancel()
	sb, err := p.create(cctx, k, w)
	if err != nil {
		p.log.Warn("pod's sandbox not made", "pod", k, "error", err)
		return p.fail(pd, ReasonCreateFailed, fmt.Sprintf("%s: %v", errkind.Of(err), err))
	}
	// Admit took only a plain UID, so the name is one component.
	logName := string(in.UID) + ".log"
	logf, err := p.openLog(logName)
	if err != nil {
		p.svc.Destroy(context.WithoutCancel(ctx), sb.ID())
		return p.fail(pd, ReasonCreateFailed, fmt.Sprintf("opening the pod's log: %v", err))
	}
	runCtx, stop := context.WithCancel(context.Background())
	p.mu.Lock()
	pd.sandbox, pd.log, pd.cancel = sb.ID(), logName, stop
	if pd.ended {
		// Deleted while its sandbox was made: drop ran before the log
		// was, and left it to this.
		p.mu.Unlock()
		stop()
		logf.Close()
		p.removeLog(k, logName)
		return p.svc.Destroy(context.WithoutCancel(ctx), sb.ID())
	}
	started := metav1.Now()
	st := &pd.obj.Status
	st.Phase = corev1.PodRunning
	st.Conditions = conditions(true)
	st.ContainerStatuses = []corev1.ContainerStatus{{
		Name: in.Spec.Containers[0].Name, Image: in.Spec.Containers[0].Image, ImageID: sb.Info().Image,
		ContainerID: "airlock://" + sb.ID(), Ready: true, Started: ptr(true),
		State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}},
	}}
	p.tell(pd)
	p.mu.Unlock()
	p.log.Info("pod running", "pod", k, "sandbox", sb.ID())

	p.runs.Go(func() { p.run(runCtx, pd, sb, w, logf) })
	return nil
}

// Wait waits for the programs of the pods already ended or deleted to
// finish their bookkeeping (records, the sandbox's destroy).
func (p *Provider) Wait() { p.runs.Wait() }

// openLog makes the pod's log file, name, in the logs directory, empty. A
// file a node's earlier process left under the name is replaced; the open
// never leaves the directory and never follows a link (os.Root, and
// O_EXCL once the name is free).
func (p *Provider) openLog(name string) (*os.File, error) {
	if err := p.logs.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return p.logs.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
}

// removeLog removes the log file name of pod k from the logs directory.
func (p *Provider) removeLog(k, name string) {
	if err := p.logs.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
		p.log.Warn("removing a pod's log", "pod", k, "log", name, "error", err)
	}
}

// create makes the pod's sandbox. The scheduler counts only this node's
// pods, the node's admission every sandbox and run on its root (airlock
// serve's and the CLI's too, and a pod's sandbox until it is destroyed), so
// a pod the scheduler placed may find the node full for a while: it stays
// Pending and is tried again until ctx ends.
func (p *Provider) create(ctx context.Context, k string, w Work) (*runner.Sandbox, error) {
	for wait := 100 * time.Millisecond; ; wait = min(2*wait, 2*time.Second) {
		sb, err := p.svc.Create(ctx, p.engine, "", w.Sandbox)
		if err == nil || !errdefs.IsResourceExhausted(err) {
			return sb, err
		}
		p.log.Info("node full; the pod waits", "pod", k, "error", err)
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
	}
}

// run runs the pod's program to its end, then records the pod's end and
// ends its sandbox.
func (p *Provider) run(ctx context.Context, pd *pod, sb *runner.Sandbox, w Work, logf *os.File) {
	defer logf.Close()
	out := &lockedWriter{w: logf}
	res, err := sb.Exec(ctx, runner.ExecSpec{Argv: w.Argv, Workdir: w.Workdir, Stdout: out, Stderr: out, Timeout: w.Sandbox.TTL,
		JobID: w.JobID, ExpectedStdout: w.ExpectedStdout, PodUID: string(pd.obj.UID)})
	var result string
	if err == nil && res.Receipt != nil {
		// A program that ran has its Result given, whatever its size: a
		// client takes no airlock node's pod's outcome without one.
		if result, err = resultMessage(res, sb.FitResult); err != nil {
			err = fmt.Errorf("the program ran, but its Result could not be given in the pod's status: %w", err)
		}
	}
	term := &corev1.ContainerStateTerminated{ExitCode: int32(res.ExitCode), Reason: string(res.Reason), Message: res.Error,
		StartedAt: metav1.NewTime(res.StartedAt), FinishedAt: metav1.Now(), ContainerID: "airlock://" + sb.ID()}
	if err != nil {
		// No program outcome to give: the client reports an error.
		term.ExitCode, term.Reason, term.Message = -1, string(runner.ReasonError), err.Error()
		p.log.Warn("pod's program has no Result to give", "pod", key(pd.obj.Namespace, pd.obj.Name), "error", err)
	}
	p.svc.Destroy(context.Background(), sb.ID())

	p.mu.Lock()
	defer p.mu.Unlock()
	if pd.ended {
		return
	}
	phase := corev1.PodSucceeded
	if term.ExitCode != 0 || term.Reason != string(runner.ReasonExited) {
		phase = corev1.PodFailed
	}
	pd.result = result
	p.terminate(pd, phase, term)
	p.log.Info("pod ended", "pod", key(pd.obj.Namespace, pd.obj.Name), "reason", term.Reason, "exit_code", term.ExitCode)
}

// resultMessage is the message of a pod's cluster.ResultCondition: res,
// the Result of its program, as JSON, cut by fit (Sandbox.FitResult), its
// receipt signed again, when it is larger than cluster.MaxResultBytes.
func resultMessage(res runner.Result, fit func(runner.Result, int) (runner.Result, error)) (string, error) {
	res, err := fit(res, cluster.MaxResultBytes)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(res)
	if err != nil {
		return "", fmt.Errorf("encoding the Result: %w", err)
	}
	if len(b) > cluster.MaxResultBytes {
		return "", fmt.Errorf("the Result is %d bytes, over the %d a pod's status takes", len(b), cluster.MaxResultBytes)
	}
	return string(b), nil
}

// terminate records the pod's end; call with p.mu held.
func (p *Provider) terminate(pd *pod, phase corev1.PodPhase, term *corev1.ContainerStateTerminated) {
	st := &pd.obj.Status
	st.Phase, st.Reason, st.Message = phase, term.Reason, term.Message
	st.Conditions = conditions(false)
	if pd.result != "" {
		st.Conditions = append(st.Conditions, corev1.PodCondition{Type: cluster.ResultCondition, Status: corev1.ConditionTrue,
			LastTransitionTime: metav1.Now(), Reason: "Ended", Message: pd.result})
	}
	c := pd.obj.Spec.Containers
	if len(st.ContainerStatuses) == 0 && len(c) > 0 {
		st.ContainerStatuses = []corev1.ContainerStatus{{Name: c[0].Name, Image: c[0].Image}}
	}
	for i := range st.ContainerStatuses {
		cs := &st.ContainerStatuses[i]
		cs.Ready, cs.Started = false, ptr(false)
		cs.State = corev1.ContainerState{Terminated: term}
	}
	p.tell(pd)
}

// fail ends a pod that never ran.
func (p *Provider) fail(pd *pod, reason, msg string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.terminate(pd, corev1.PodFailed, &corev1.ContainerStateTerminated{ExitCode: -1, Reason: reason, Message: msg, FinishedAt: metav1.Now()})
	return nil
}

// UpdatePod takes nothing of a running pod's changes: what a sandbox may
// do is fixed when it is made. A pod of another UID under a name the node
// holds is a new pod (the pod controller updates, rather than creates, a
// name its provider knows).
func (p *Provider) UpdatePod(ctx context.Context, in *corev1.Pod) error {
	p.mu.Lock()
	held, ok := p.pods[key(in.Namespace, in.Name)]
	p.mu.Unlock()
	if ok && held.obj.UID == in.UID {
		return nil
	}
	return p.CreatePod(ctx, in)
}

// DeletePod ends the pod's program and sandbox, removes its log and tells
// the pod's end.
func (p *Provider) DeletePod(ctx context.Context, in *corev1.Pod) error {
	k := key(in.Namespace, in.Name)
	p.mu.Lock()
	pd, ok := p.pods[k]
	p.mu.Unlock()
	if !ok || pd.obj.UID != in.UID {
		return nil
	}
	id, err := p.drop(ctx, k, pd)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if pd.obj.Status.Phase != corev1.PodSucceeded && pd.obj.Status.Phase != corev1.PodFailed {
		p.terminate(pd, corev1.PodFailed, &corev1.ContainerStateTerminated{ExitCode: 137, Reason: ReasonDeleted, FinishedAt: metav1.Now()})
	} else {
		p.tell(pd)
	}
	p.log.Info("pod deleted", "pod", k, "sandbox", id)
	return nil
}

// drop ends a pod's program and sandbox, removes its log and forgets the
// pod, without telling its end; it returns the sandbox's id.
func (p *Provider) drop(ctx context.Context, k string, pd *pod) (string, error) {
	p.mu.Lock()
	pd.ended = true
	logName := pd.log
	p.mu.Unlock()
	id, err := p.endSandbox(ctx, pd)
	if err != nil {
		return id, fmt.Errorf("ending pod %s's sandbox %s: %w", k, id, err)
	}
	if logName != "" {
		p.removeLog(k, logName)
	}
	p.mu.Lock()
	if p.pods[k] == pd {
		delete(p.pods, k)
	}
	p.mu.Unlock()
	return id, nil
}

// EndedElsewhere ends the sandbox of a pod the node still runs but the
// cluster holds as ended: airlock's cluster controller failed it once the
// node's lease expired, the node cut off from the API server meanwhile.
// The pod's end is the cluster's word; its program must not outlive it.
func (p *Provider) EndedElsewhere(ctx context.Context, in *corev1.Pod) {
	if in.Status.Phase != corev1.PodFailed && in.Status.Phase != corev1.PodSucceeded {
		return
	}
	k := key(in.Namespace, in.Name)
	p.mu.Lock()
	pd, ok := p.pods[k]
	if !ok || pd.obj.UID != in.UID || pd.ended || pd.obj.Status.Phase == corev1.PodFailed || pd.obj.Status.Phase == corev1.PodSucceeded {
		p.mu.Unlock()
		return
	}
	pd.ended = true
	pd.obj.Status = *in.Status.DeepCopy()
	p.mu.Unlock()
	p.log.Warn("the cluster ended a pod this node ran; ending its sandbox", "pod", k, "reason", in.Status.Reason, "message", in.Status.Message)
	if id, err := p.endSandbox(ctx, pd); err != nil {
		// The pod's deletion tries again.
		p.log.Error("ending the sandbox of a pod the cluster ended", "pod", k, "sandbox", id, "error", err)
	}
}

// endSandbox ends an ended pod's program and sandbox, and returns the
// sandbox's id. A sandbox that could not be destroyed stays the pod's,
// for a later call (the pod's deletion, tried again) to end.
func (p *Provider) endSandbox(ctx context.Context, pd *pod) (string, error) {
	p.mu.Lock()
	id, cancel := pd.sandbox, pd.cancel
	pd.sandbox = ""
	p.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if id == "" {
		return "", nil
	}
	if err := p.svc.Destroy(context.WithoutCancel(ctx), id); err != nil {
		p.mu.Lock()
		pd.sandbox = id
		p.mu.Unlock()
		return id, err
	}
	return id, nil
}

// GetPod returns the pod as the node knows it, or nil.
func (p *Provider) GetPod(_ context.Context, ns, name string) (*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if pd, ok := p.pods[key(ns, name)]; ok {
		return pd.obj.DeepCopy(), nil
	}
	return nil, nil
}

// GetPodStatus returns the pod's status, or nil.
func (p *Provider) GetPodStatus(ctx context.Context, ns, name string) (*corev1.PodStatus, error) {
	pd, _ := p.GetPod(ctx, ns, name)
	if pd == nil {
		return nil, nil
	}
	return &pd.Status, nil
}

// GetPods lists the pods the node holds.
func (p *Provider) GetPods(context.Context) ([]*corev1.Pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*corev1.Pod, 0, len(p.pods))
	for _, pd := range p.pods {
		out = append(out, pd.obj.DeepCopy())
	}
	return out, nil
}

// GetContainerLogs opens the output of the pod's program, for kubectl
// logs: all of it, or its last opts.Tail lines, or its last
// opts.LimitBytes bytes. Following (-f) gives what there is so far.
func (p *Provider) GetContainerLogs(_ context.Context, ns, name, container string, opts api.ContainerLogOpts) (io.ReadCloser, error) {
	pd, err := p.container(ns, name, container)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	logName := pd.log
	p.mu.Unlock()
	if logName == "" {
		return io.NopCloser(strings.NewReader("")), nil
	}
	// Read from the file, never whole into memory: a log is as large as
	// the pod's output cap lets it be.
	f, err := p.logs.Open(logName)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	size, start := fi.Size(), int64(0)
	if opts.Tail > 0 {
		if start, err = tailStart(f, size, opts.Tail); err != nil {
			f.Close()
			return nil, err
		}
	}
	if opts.LimitBytes > 0 && size-start > int64(opts.LimitBytes) {
		start = size - int64(opts.LimitBytes)
	}
	return struct {
		io.Reader
		io.Closer
	}{io.NewSectionReader(f, start, size-start), f}, nil
}

// tailStart is the offset of the first of the last n lines of the size
// bytes of r (a final line break ends the last line, it starts none).
func tailStart(r io.ReaderAt, size int64, n int) (int64, error) {
	buf := make([]byte, 64<<10)
	end := size
	if end > 0 {
		if _, err := r.ReadAt(buf[:1], end-1); err != nil {
			return 0, err
		}
		if buf[0] == '\n' {
			end--
		}
	}
	for end > 0 {
		from := max(0, end-int64(len(buf)))
		b := buf[:end-from]
		if _, err := r.ReadAt(b, from); err != nil && err != io.EOF {
			return 0, err
		}
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] == '\n' {
				if n--; n == 0 {
					return from + int64(i) + 1, nil
				}
			}
		}
		end = from
	}
	return 0, nil
}

// RunInContainer runs cmd in the pod's sandbox for kubectl exec, as
// airlock exec does: the sandbox's policy, its exec timeout and output
// cap. A terminal is refused; a non-zero exit is the exec's exit code.
func (p *Provider) RunInContainer(ctx context.Context, ns, name, container string, cmd []string, attach api.AttachIO) error {
	pd, err := p.container(ns, name, container)
	if err != nil {
		return err
	}
	if attach.TTY() {
		return fmt.Errorf("%w: airlock sandboxes give an exec no terminal: drop -t", errdefs.ErrInvalidArgument)
	}
	p.mu.Lock()
	id, limit := pd.sandbox, pd.execLimit
	running := pd.obj.Status.Phase == corev1.PodRunning
	p.mu.Unlock()
	if id == "" || !running {
		return fmt.Errorf("%w: pod %s/%s is not running", errdefs.ErrFailedPrecondition, ns, name)
	}
	sb, done, err := p.svc.Open(ctx, id)
	if err != nil {
		return err
	}
	defer done()
	spec := runner.ExecSpec{Argv: cmd, Stdin: attach.Stdin(), Timeout: limit, ResultBytes: execResultBytes}
	if w := attach.Stdout(); w != nil {
		spec.Stdout = w
	}
	if w := attach.Stderr(); w != nil {
		spec.Stderr = w
	}
	res, err := sb.Exec(ctx, spec)
	if err != nil {
		return err
	}
	p.log.Info("kubectl exec", "pod", key(ns, name), "sandbox", id, "reason", res.Reason, "exit_code", res.ExitCode)
	if res.ExitCode != 0 {
		return utilexec.CodeExitError{Err: fmt.Errorf("%s: exit code %d", res.Reason, res.ExitCode), Code: res.ExitCode}
	}
	return nil
}

// container finds a pod the node runs, and checks the container's name.
func (p *Provider) container(ns, name, container string) (*pod, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pd, ok := p.pods[key(ns, name)]
	if !ok {
		return nil, fmt.Errorf("%w: pod %s/%s is not on this node", errdefs.ErrNotFound, ns, name)
	}
	if c := pd.obj.Spec.Containers; len(c) != 1 || c[0].Name != container {
		return nil, fmt.Errorf("%w: pod %s/%s has no container %q", errdefs.ErrNotFound, ns, name, container)
	}
	return pd, nil
}

func conditions(ready bool) []corev1.PodCondition {
	now := metav1.Now()
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: st, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: st, LastTransitionTime: now},
	}
}

func ptr[T any](v T) *T { return &v }

// lockedWriter lets stdout and stderr share one log.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
