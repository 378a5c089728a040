//go:build e2e

// Package kube_test runs airlock nodes against a real control plane
// (make kube-up's: kube-apiserver, the scheduler, the controller manager
// and agent-sandbox's controller, built from source) and real sandboxes.
package kube_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/airlock-sandbox/airlock/internal/e2etest"
	"github.com/airlock-sandbox/airlock/runner"
)

var (
	airlockBin string
	kubeconfig string // the control plane's admin
	tmp        string
)

func TestMain(m *testing.M) {
	code, err := setup(m)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kube e2e setup: %v\n", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func setup(m *testing.M) (int, error) {
	var err error
	if tmp, err = os.MkdirTemp("", "airlock-kube-e2e-"); err != nil {
		return 0, err
	}
	defer os.RemoveAll(tmp)
	if airlockBin, err = e2etest.Build(tmp, "../../cmd/airlock"); err != nil {
		return 0, err
	}
	build := exec.Command("go", "build", "-o", filepath.Join(tmp, "airlock-node"), "../../cmd/airlock-node")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return 0, fmt.Errorf("building airlock-node: %w", err)
	}
	out, err := kubeTool("up")
	if err != nil {
		return 0, err
	}
	if strings.Contains(out, "already up") {
		return 0, fmt.Errorf("a control plane is up already; run make kube-down first")
	}
	defer func() {
		if out, err := kubeTool("down"); err != nil {
			fmt.Fprintf(os.Stderr, "kube down: %v\n%s", err, out)
		}
	}()
	kubeconfig = filepath.Join(e2etest.SysRoot(), "kube", "kubeconfig")
	code := m.Run()
	// The nodes' roots: no sandbox, run or mount left.
	roots, _ := filepath.Glob(filepath.Join(tmp, "*", "root"))
	for _, root := range roots {
		for _, glob := range []string{"oci/bundles/*", "sandboxes/sb-*", "runs/*"} {
			if left, _ := filepath.Glob(filepath.Join(root, glob)); len(left) > 0 {
				fmt.Fprintf(os.Stderr, "left behind: %v\n", left)
				code = 1
			}
		}
		if e2etest.MountsLeft(root) {
			fmt.Fprintf(os.Stderr, "mounts left behind under %s\n", root)
			code = 1
		}
	}
	return code, nil
}

// kubeTool runs tools/kube's command (make kube-up's) with args.
func kubeTool(args ...string) (string, error) {
	c := exec.Command("go", append([]string{"run", "./cmd/kube"}, args...)...)
	c.Dir = "../../tools/kube"
	var out bytes.Buffer
	c.Stdout, c.Stderr = &out, os.Stderr
	err := c.Run()
	return out.String(), err
}

// node is one running `airlock node`, with a root of its own.
type node struct {
	name, root string
	port       int
	creds      string // its credentials' directory
	cmd        *exec.Cmd
	log        *bytes.Buffer
}

// freePort is a loopback TCP port free now.
func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startNode starts `airlock node` as name, with a root of its own and
// credentials of its own, and waits until it runs pods.
func startNode(t testing.TB, name string) *node {
	t.Helper()
	root, err := e2etest.Root(filepath.Join(tmp, name), e2etest.SysRoot())
	if err != nil {
		t.Fatal(err)
	}
	return runNode(t, name, root)
}

// runNode starts `airlock node` as name on root and waits until it runs
// pods.
func runNode(t testing.TB, name, root string) *node {
	t.Helper()
	out, err := kubeTool("node", name)
	if err != nil {
		t.Fatalf("kube node %s: %v", name, err)
	}
	kc := strings.TrimSpace(out)
	creds := filepath.Dir(kc)
	n := &node{name: name, root: root, log: &bytes.Buffer{}, port: freePort(t), creds: creds}
	// A 20 s lease (renewed every 5 s): airlock node controller, given 5 s
	// of grace, fails a lost node's pods some 25 s after its last renewal.
	n.cmd = exec.Command(airlockBin, "--root", root, "node", "--kubeconfig", kc, "--name", name, "--max-sandboxes", "4", "--lease-duration", "20s",
		"--port", strconv.Itoa(n.port), "--tls-cert", filepath.Join(creds, name+".crt"), "--tls-key", filepath.Join(creds, name+".key"),
		"--client-ca", filepath.Join(creds, "ca.crt"))
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	n.cmd.Stderr = pw
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		once := false
		for sc.Scan() {
			line := sc.Text()
			n.log.WriteString(line + "\n")
			if !once && strings.Contains(line, "registered and running pods") {
				once = true
				close(ready)
			}
		}
	}()
	t.Cleanup(func() { n.stop(t) })
	select {
	case <-ready:
	case <-time.After(90 * time.Second):
		t.Fatalf("airlock node %s did not come up:\n%s", name, n.log)
	}
	return n
}

// startController applies the roles `airlock node controller
// --print-rbac` prints for a user of its own, starts the controller with
// that user's credentials and waits until it watches the nodes' leases.
func startController(t testing.TB) {
	t.Helper()
	out, err := kubeTool("user", "airlock-controller")
	if err != nil {
		t.Fatalf("kube user airlock-controller: %v", err)
	}
	kubectl(t, airlock(t, tmp, "node", "controller", "--print-rbac", "--user", "airlock-controller"), "apply", "-f", "-")
	c := exec.Command(airlockBin, "--root", tmp, "node", "controller", "--kubeconfig", strings.TrimSpace(out), "--grace", "5s")
	var log bytes.Buffer
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Stderr = pw
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	ready := make(chan struct{})
	var mu sync.Mutex
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			mu.Lock()
			log.WriteString(sc.Text() + "\n")
			mu.Unlock()
			if strings.Contains(sc.Text(), "watching the airlock nodes' leases") {
				close(ready)
			}
		}
	}()
	t.Cleanup(func() {
		c.Process.Signal(syscall.SIGTERM)
		c.Wait()
		if t.Failed() {
			mu.Lock()
			t.Logf("airlock node controller's log:\n%s", log.String())
			mu.Unlock()
		}
	})
	select {
	case <-ready:
	case <-time.After(time.Minute):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("airlock node controller did not come up:\n%s", log.String())
	}
}

func (n *node) stop(t testing.TB) {
	if n.cmd.ProcessState != nil {
		return
	}
	n.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- n.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		n.cmd.Process.Kill()
		<-done
		t.Errorf("airlock node %s did not stop on SIGTERM", n.name)
	}
	if t.Failed() {
		t.Logf("airlock node %s's log:\n%s", n.name, n.log)
		// A failed test may have left pods running: end their sandboxes,
		// which would otherwise live to their TTL.
		for _, si := range n.sandboxes(t) {
			exec.Command(airlockBin, "--root", n.root, "sandbox", "rm", si.ID).Run()
		}
	}
}

// sandboxes lists the node's sandboxes by the pod UID they run.
func (n *node) sandboxes(t testing.TB) map[string]runner.SandboxInfo {
	t.Helper()
	out, err := exec.Command(airlockBin, "--root", n.root, "sandbox", "ls", "--json").Output()
	if err != nil {
		t.Fatalf("sandbox ls on %s: %v", n.name, err)
	}
	var list []runner.SandboxInfo
	if err := json.Unmarshal(out, &list); err != nil {
		t.Fatalf("sandbox ls on %s: %v: %s", n.name, err, out)
	}
	m := map[string]runner.SandboxInfo{}
	for _, si := range list {
		m[si.Labels["k8s-uid"]] = si
	}
	return m
}

func client(t testing.TB) *kubernetes.Clientset {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(cfg)
}

// kubectlCmd is kubectl of the control plane's release (the one make
// kube-up links; not the host's), with the admin's kubeconfig and a home
// of its own.
func kubectlCmd(t testing.TB, args ...string) *exec.Cmd {
	home := t.TempDir()
	bin := filepath.Join(e2etest.SysRoot(), "kube", "run", "bin", "kubectl")
	c := exec.Command(bin, append([]string{"--kubeconfig=" + kubeconfig, "--cache-dir=" + filepath.Join(home, "cache")}, args...)...)
	c.Env = append(os.Environ(), "HOME="+home)
	return c
}

// kubectl runs kubectl, stdin given.
func kubectl(t testing.TB, stdin []byte, args ...string) string {
	t.Helper()
	c := kubectlCmd(t, args...)
	c.Stdin = bytes.NewReader(stdin)
	out, err := c.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// kubectlOut runs kubectl for a log, its failure in its output.
func kubectlOut(t testing.TB, args ...string) string {
	out, _ := kubectlCmd(t, args...).CombinedOutput()
	return string(out)
}

// kubectlCode runs kubectl and returns its output and exit code.
func kubectlCode(t testing.TB, args ...string) (string, int) {
	out, err := kubectlCmd(t, args...).CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatalf("kubectl %v: %v", args, err)
	}
	return string(out), 0
}

// nodeGet GETs url from node n's API, trusting the cluster's CA, with as's
// client certificate (none when as is nil), and returns the status.
func nodeGet(t testing.TB, url string, n, as *node) int {
	t.Helper()
	caPEM, err := os.ReadFile(filepath.Join(n.creds, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	cfg := &tls.Config{RootCAs: pool}
	if as != nil {
		// The other node's own client certificate, from its kubeconfig.
		kc, err := clientcmd.LoadFromFile(filepath.Join(as.creds, as.name+".kubeconfig"))
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range kc.AuthInfos {
			cert, err := tls.X509KeyPair(u.ClientCertificateData, u.ClientKeyData)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
	}
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

func airlock(t testing.TB, root string, args ...string) []byte {
	t.Helper()
	var stderr bytes.Buffer
	c := exec.Command(airlockBin, append([]string{"--root", root}, args...)...)
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		t.Fatalf("airlock %v: %v: %s", args, err, stderr.String())
	}
	return out
}

// waitFor polls cond every 200ms until it holds or d passes.
func waitFor(t testing.TB, d time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(d)
	last := ""
	for time.Now().Before(deadline) {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v; last: %s", what, d, last)
}

// TestNodes: two airlock nodes register, tainted and ready; a template's
// warm pool of 2 becomes two Running pods on them, each an airlock sandbox
// in its node's root; a pod's program's end is the pod's, with airlock's
// reason; pods asking for a tag, a host path or privilege fail naming the
// field; and deleting the pods leaves no sandbox on either node.
func TestNodes(t *testing.T) {
	ctx := context.Background()
	nodes := map[string]*node{}
	for _, name := range []string{"airlock-a", "airlock-b"} {
		nodes[name] = startNode(t, name)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("pods:\n%s", kubectlOut(t, "get", "pods", "-o", "wide"))
			t.Logf("events:\n%s", kubectlOut(t, "get", "events", "-A"))
		}
	})
	cs := client(t)
	// The controller refuses credentials without its roles, naming what
	// they lack: here, a node's.
	refused := exec.Command(airlockBin, "--root", tmp, "node", "controller", "--kubeconfig", filepath.Join(nodes["airlock-a"].creds, "airlock-a.kubeconfig"))
	if out, err := refused.CombinedOutput(); err == nil || !strings.Contains(string(out), "may not get nodes") || !strings.Contains(string(out), "--print-rbac") {
		t.Errorf("airlock node controller with a node's credentials: %v\n%s", err, out)
	}
	startController(t)
	for name := range nodes {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ready := false
		for _, c := range n.Status.Conditions {
			ready = ready || c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue
		}
		tainted := false
		for _, tn := range n.Spec.Taints {
			tainted = tainted || tn.Key == "airlock.dev/sandbox" && tn.Effect == corev1.TaintEffectNoSchedule
		}
		if !ready || !tainted || n.Labels["airlock.dev/node"] != "true" {
			t.Errorf("node %s: ready %v, taints %v, labels %v", name, ready, n.Spec.Taints, n.Labels)
		}
		if q := n.Status.Capacity[corev1.ResourcePods]; q.Value() != 4 {
			t.Errorf("node %s's pod capacity is %s, want 4", name, q.String())
		}
	}

	// Each node publishes its receipt key: a receipt signed under one
	// node's root verifies against a trust file of the nodes' keys, and
	// not against one that lists only the other node.
	trust := func(names ...string) string {
		var b strings.Builder
		for _, name := range names {
			n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s %s\n", name, n.Annotations["airlock.dev/receipt-key"])
		}
		f := filepath.Join(t.TempDir(), "trust")
		os.WriteFile(f, []byte(b.String()), 0o600)
		return f
	}
	result := filepath.Join(t.TempDir(), "result.json")
	os.WriteFile(result, airlock(t, nodes["airlock-b"].root, "run", "--json", "--", "true"), 0o600)
	// The trust file as docs/kubernetes.md makes it.
	all := filepath.Join(t.TempDir(), "nodes.txt")
	os.WriteFile(all, []byte(kubectl(t, nil, "get", "nodes", "-l", "airlock.dev/node=true", "-o",
		`jsonpath={range .items[*]}{.metadata.name} {.metadata.annotations.airlock\.dev/receipt-key}{"\n"}{end}`)), 0o600)
	if out := string(airlock(t, nodes["airlock-a"].root, "receipt", "verify", "--trust", all, result)); !strings.Contains(out, "Signed by airlock-b") {
		t.Errorf("a node's receipt against the nodes' published keys:\n%s", out)
	}
	c := exec.Command(airlockBin, "--root", nodes["airlock-a"].root, "receipt", "verify", "--trust", trust("airlock-a"), result)
	if out, err := c.CombinedOutput(); c.ProcessState.ExitCode() != 65 || !strings.Contains(string(out), "does not list") {
		t.Errorf("a receipt of a node the trust file does not list: %v\n%s", err, out)
	}

	// A warm pool of 2, rendered from a template, runs on the nodes.
	a := nodes["airlock-a"]
	airlock(t, a.root, "template", "create", "kt", "--memory", "256MiB", "--cpus", "0.5")
	yaml := airlock(t, a.root, "kube", "render", "--template", "kt", "--warm", "2", "--ttl", "10m")
	kubectl(t, yaml, "apply", "-f", "-")
	var pods []corev1.Pod
	waitFor(t, 3*time.Minute, "the warm pool's 2 pods Running on airlock nodes", func() (bool, string) {
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "airlock.dev/template=kt"})
		if err != nil {
			return false, err.Error()
		}
		var state []string
		running := 0
		for _, p := range list.Items {
			state = append(state, fmt.Sprintf("%s on %q: %s %s", p.Name, p.Spec.NodeName, p.Status.Phase, p.Status.Message))
			if p.Status.Phase == corev1.PodRunning && nodes[p.Spec.NodeName] != nil {
				running++
			}
		}
		pods = list.Items
		return running == 2 && len(list.Items) == 2, strings.Join(state, "; ")
	})
	for _, p := range pods {
		si, ok := nodes[p.Spec.NodeName].sandboxes(t)[string(p.UID)]
		if !ok || si.State != "running" || si.Isolation != "gvisor" {
			t.Errorf("pod %s: no running gVisor sandbox on %s: %+v", p.Name, p.Spec.NodeName, si)
		}
		if cs := p.Status.ContainerStatuses; len(cs) != 1 || cs[0].State.Running == nil || !strings.HasPrefix(cs[0].ContainerID, "airlock://sb-") {
			t.Errorf("pod %s's container status: %+v", p.Name, cs)
		}
	}

	// A claim on the warm pool takes one of its sandboxes: a Running pod
	// on an airlock node.
	kubectl(t, []byte(`{"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
 "metadata": {"name": "kt-claim", "namespace": "default"}, "spec": {"warmPoolRef": {"name": "kt"}}}`), "apply", "-f", "-")
	var claimed string
	waitFor(t, 2*time.Minute, "the claim bound to a ready sandbox", func() (bool, string) {
		out := kubectlOut(t, "get", "sandboxclaim", "kt-claim", "-o", `jsonpath={.status.sandbox.name} {.status.conditions[?(@.type=="Ready")].status}`)
		f := strings.Fields(out)
		if len(f) == 2 && f[1] == "True" {
			claimed = f[0]
			return true, ""
		}
		return false, out + " / " + kubectlOut(t, "get", "sandboxclaim", "kt-claim", "-o", "yaml")
	})
	if p, err := cs.CoreV1().Pods("default").Get(ctx, claimed, metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodRunning || nodes[p.Spec.NodeName] == nil {
		t.Errorf("the claimed sandbox's pod %s: %v", claimed, err)
	} else {
		t.Logf("the claim took sandbox %s, a Running pod on %s", claimed, p.Spec.NodeName)
	}

	// Pods of the node's own: a program's end is the pod's.
	image := pods[0].Spec.Containers[0].Image
	for _, c := range []struct {
		name  string
		cmd   string
		phase corev1.PodPhase
		exit  int32
	}{{"exit0", "echo hello", corev1.PodSucceeded, 0}, {"exit3", "echo bye; exit 3", corev1.PodFailed, 3}} {
		p := pod(c.name, "airlock-b", image, func(p *corev1.Pod) { p.Spec.Containers[0].Command = []string{"sh", "-c", c.cmd} })
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got := waitPhase(t, cs, c.name, corev1.PodSucceeded, corev1.PodFailed)
		term := got.Status.ContainerStatuses[0].State.Terminated
		if got.Status.Phase != c.phase || term == nil || term.ExitCode != c.exit || term.Reason != "exited" {
			t.Errorf("pod %s: %s, %+v; want %s, exit %d, reason exited", c.name, got.Status.Phase, term, c.phase, c.exit)
		}
	}

	// kubectl logs and exec reach the program and the sandbox through the
	// API server and the node's own API.
	if got := kubectl(t, nil, "logs", "exit3"); got != "bye\n" {
		t.Errorf("kubectl logs exit3 = %q, want %q", got, "bye\n")
	}
	warm := pods[0].Name
	// stdout and stderr are separate streams, merged here by kubectl in
	// the order they arrive: stderr's line may come before stdout's last.
	// kubectl may log a line of its own there too (klog's header; kubectl
	// 1.32 logged "Unknown stream id 1, discarding message" against the
	// 1.37 API server): not the program's.
	execOut := klogLine.ReplaceAllString(kubectl(t, []byte("from stdin"), "exec", "-i", warm, "--", "sh", "-c", "cat; echo; id -u; echo err >&2"), "")
	if strings.Replace(execOut, "err\n", "", 1) != "from stdin\n65534\n" || !strings.Contains(execOut, "err\n") {
		t.Errorf("kubectl exec -i %s = %q", warm, execOut)
	}
	if out, code := kubectlCode(t, "exec", warm, "--", "sh", "-c", "echo four; exit 4"); code != 4 || !strings.Contains(out, "four") {
		t.Errorf("kubectl exec exiting 4: exit %d, %q", code, out)
	}
	// The node's API serves only whom the API server allows: another
	// node's credentials are refused, and no credentials at all.
	warmNode := nodes[pods[0].Spec.NodeName]
	other := nodes["airlock-a"]
	if other == warmNode {
		other = nodes["airlock-b"]
	}
	logsURL := fmt.Sprintf("https://127.0.0.1:%d/containerLogs/default/%s/sandbox", warmNode.port, warm)
	if code := nodeGet(t, logsURL, warmNode, other); code != 403 {
		t.Errorf("node %s's API, with node %s's credentials: HTTP %d, want 403", warmNode.name, other.name, code)
	}
	if code := nodeGet(t, logsURL, warmNode, nil); code != 401 {
		t.Errorf("node %s's API, with no credentials: HTTP %d, want 401", warmNode.name, code)
	}

	// What the node cannot honour fails the pod, naming the field.
	for _, c := range []struct {
		name, field string
		mutate      func(*corev1.Pod)
	}{
		{"tag", "spec.containers[0].image", func(p *corev1.Pod) { p.Spec.Containers[0].Image = "python:3.12" }},
		{"hostpath", "spec.volumes[0].hostPath", func(p *corev1.Pod) {
			p.Spec.Volumes = []corev1.Volume{{Name: "etc", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/etc"}}}}
			p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "etc", MountPath: "/host"}}
		}},
		{"privileged", "spec.containers[0].securityContext.privileged", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{Privileged: ptr(true)}
		}},
	} {
		if _, err := cs.CoreV1().Pods("default").Create(ctx, pod(c.name, "airlock-a", image, c.mutate), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got := waitPhase(t, cs, c.name, corev1.PodFailed, corev1.PodSucceeded)
		if got.Status.Phase != corev1.PodFailed || got.Status.Reason != "AirlockRefused" || !strings.HasPrefix(got.Status.Message, c.field+":") {
			t.Errorf("pod %s: %s %s %q; want Failed AirlockRefused naming %s", c.name, got.Status.Phase, got.Status.Reason, got.Status.Message, c.field)
		}
	}
	// An output cap over the node's ceiling (held in the node's memory
	// and on its disk) fails the pod as it starts, naming the flag.
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod("huge-output", "airlock-a", image, func(p *corev1.Pod) {
		p.Annotations = map[string]string{"airlock.dev/output-limit": "64GiB"}
	}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := waitPhase(t, cs, "huge-output", corev1.PodFailed, corev1.PodSucceeded); got.Status.Phase != corev1.PodFailed ||
		got.Status.Reason != "AirlockCreateFailed" || !strings.Contains(got.Status.Message, "above this node's ceiling of 1GiB (airlock node --max-output-limit)") {
		t.Errorf("pod huge-output: %s %s %q; want Failed AirlockCreateFailed naming --max-output-limit", got.Status.Phase, got.Status.Reason, got.Status.Message)
	}
	running, _ := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=airlock-a,status.phase=Running"})
	if n := len(a.sandboxes(t)); n != len(running.Items) {
		t.Errorf("airlock-a holds %d sandboxes for %d running pods; the refused pods must make none", n, len(running.Items))
	}

	// A node killed with SIGKILL and started again ends the sandbox its
	// last process left, and fails that pod rather than run its program
	// twice.
	victim := nodes[pods[0].Spec.NodeName]
	victim.cmd.Process.Kill()
	victim.cmd.Wait()
	if _, ok := victim.sandboxes(t)[string(pods[0].UID)]; !ok {
		t.Fatalf("the sandbox of pod %s is gone with its node's process; the restart has nothing to end", pods[0].Name)
	}
	nodes[victim.name] = runNode(t, victim.name, victim.root)
	got := waitPhase(t, cs, pods[0].Name, corev1.PodFailed, corev1.PodSucceeded)
	if got.Status.Phase != corev1.PodFailed || got.Status.Reason != "AirlockNodeRestarted" {
		t.Errorf("pod %s after its node's restart: %s %s %q", got.Name, got.Status.Phase, got.Status.Reason, got.Status.Message)
	}
	if _, ok := nodes[victim.name].sandboxes(t)[string(pods[0].UID)]; ok {
		t.Errorf("the sandbox of pod %s outlived its node's restart", pods[0].Name)
	}
	a = nodes["airlock-a"]
	partition(t, cs, nodes["airlock-b"], image)

	engineKube(t, cs, nodes, all)
	serveKube(t)

	// Deleting every pod leaves no sandbox on either node.
	kubectl(t, nil, "delete", "sandboxclaim", "kt-claim", "--wait=true")
	kubectl(t, yaml, "delete", "-f", "-", "--wait=true")
	for _, name := range []string{"exit0", "exit3", "tag", "hostpath", "privileged", "huge-output", "partitioned"} {
		if err := cs.CoreV1().Pods("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("deleting pod %s: %v", name, err)
		}
	}
	waitFor(t, 2*time.Minute, "no pod and no sandbox left", func() (bool, string) {
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		left := len(a.sandboxes(t)) + len(nodes["airlock-b"].sandboxes(t))
		return len(list.Items) == 0 && left == 0, fmt.Sprintf("%d pods, %d sandboxes", len(list.Items), left)
	})

	batchKube(t, cs, nodes, all, image)
}

// partition: a node cut off from the API server (stopped) past its lease
// has its pod failed by airlock node controller, AirlockNodeLost, while its
// sandbox runs on; the node, back, ends that sandbox, and the pod stays
// failed.
func partition(t *testing.T, cs *kubernetes.Clientset, cut *node, image string) {
	ctx := context.Background()
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod("partitioned", cut.name, image, func(*corev1.Pod) {}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := waitPhase(t, cs, "partitioned", corev1.PodRunning)
	if _, ok := cut.sandboxes(t)[string(p.UID)]; !ok {
		t.Fatalf("pod partitioned runs on %s with no sandbox there", cut.name)
	}
	if err := cut.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			cut.cmd.Process.Signal(syscall.SIGCONT)
		}
	}
	defer resume()
	got := waitPhase(t, cs, "partitioned", corev1.PodFailed, corev1.PodSucceeded)
	t.Logf("node %s stopped: its pod failed %v later: %s", cut.name, time.Since(stopped).Round(time.Millisecond), got.Status.Message)
	term := got.Status.ContainerStatuses[0].State.Terminated
	if got.Status.Reason != "AirlockNodeLost" || !strings.Contains(got.Status.Message, "node "+cut.name+" stopped renewing its lease") || term == nil || term.ExitCode != 137 || term.Reason != "AirlockNodeLost" {
		t.Errorf("pod partitioned after its node's lease expired: %s %s %q, %+v", got.Status.Phase, got.Status.Reason, got.Status.Message, term)
	}
	disrupted := false
	for _, c := range got.Status.Conditions {
		disrupted = disrupted || c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue && c.Reason == "AirlockNodeLost"
	}
	if !disrupted {
		t.Errorf("pod partitioned has no DisruptionTarget condition: %+v", got.Status.Conditions)
	}
	if _, ok := cut.sandboxes(t)[string(p.UID)]; !ok {
		t.Errorf("the sandbox of pod partitioned ended while its node was stopped: nothing should have ended it yet")
	}
	resume()
	waitFor(t, 2*time.Minute, "node "+cut.name+", back, ends the failed pod's sandbox", func() (bool, string) {
		_, ok := cut.sandboxes(t)[string(p.UID)]
		return !ok, "the sandbox is still there"
	})
	waitFor(t, 2*time.Minute, "node "+cut.name+" Ready again", func() (bool, string) {
		n, err := cs.CoreV1().Nodes().Get(ctx, cut.name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, c := range n.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, string(c.Status) + " " + c.Message
			}
		}
		return false, "no Ready condition"
	})
	if p, err := cs.CoreV1().Pods("default").Get(ctx, "partitioned", metav1.GetOptions{}); err != nil || p.Status.Phase != corev1.PodFailed || p.Status.Reason != "AirlockNodeLost" {
		t.Errorf("pod partitioned once its node is back: %v %+v", err, p.Status)
	}
	if !strings.Contains(cut.log.String(), "the cluster ended a pod this node ran") {
		t.Errorf("node %s's log does not say it ended the lost pod's sandbox", cut.name)
	}
}

// batchKube: `airlock batch --engine kube` runs 40 jobs over both nodes,
// each result verifying against the nodes' published keys; then a batch
// during which one node is killed with SIGKILL completes every job, those
// the lost node held run again on the other, and a pod of the lost node's
// own is failed once its lease expires.
func batchKube(t *testing.T, cs *kubernetes.Clientset, nodes map[string]*node, trust, image string) {
	ctx := context.Background()
	dir := t.TempDir()
	client := filepath.Join(tmp, "client")
	yaml := airlock(t, nodes["airlock-a"].root, "kube", "render", "--template", "kt")
	kubectl(t, yaml, "apply", "-f", "-")
	defer kubectl(t, yaml, "delete", "-f", "-", "--wait=true")
	jobsFile := func(name string, n int, sleep string) string {
		var b strings.Builder
		for i := range n {
			id := fmt.Sprintf("%s-%02d", name, i)
			j, _ := json.Marshal(map[string]any{"id": id, "argv": []string{"sh", "-c", "sleep " + sleep + "; echo " + id}, "expected_stdout": id + "\n"})
			b.Write(append(j, '\n'))
		}
		p := filepath.Join(dir, name+"-jobs.jsonl")
		os.WriteFile(p, []byte(b.String()), 0o600)
		return p
	}
	batch := func(jobs, out string) *exec.Cmd {
		c := exec.Command(airlockBin, "--root", client, "batch", jobs, "--out", out, "--engine", "kube", "--template", "kt", "--parallel", "6")
		c.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		return c
	}
	// results reads out's lines, checks each passed and verifies against
	// trust, and counts them by signing node.
	results := func(out string, want int) map[string]int {
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != want {
			t.Fatalf("%s: %d results, want %d:\n%s", out, len(lines), want, b)
		}
		by := map[string]int{}
		for i, line := range lines {
			var br runner.BatchResult
			if err := json.Unmarshal([]byte(line), &br); err != nil || br.Pass == nil || !*br.Pass || br.Receipt == nil || br.Receipt.Receipt.JobID != br.JobID {
				t.Errorf("result %d: %v: %.400s", i, err, line)
				continue
			}
			f := filepath.Join(dir, "line.json")
			os.WriteFile(f, []byte(line), 0o600)
			v := exec.Command(airlockBin, "--root", client, "receipt", "verify", "--trust", trust, f)
			vo, err := v.CombinedOutput()
			signer, _, _ := strings.Cut(strings.TrimPrefix(string(vo), "Signed by "), ",")
			if err != nil || nodes[signer] == nil {
				t.Errorf("receipt verify of job %s: %v\n%s", br.JobID, err, vo)
			}
			by[signer]++
		}
		return by
	}

	start := time.Now()
	out := filepath.Join(dir, "spread.jsonl")
	if b, err := batch(jobsFile("spread", 40, "1"), out).CombinedOutput(); err != nil {
		t.Fatalf("batch --engine kube: %v\n%s", err, b)
	}
	by := results(out, 40)
	t.Logf("40 jobs in %v, by node: %v", time.Since(start).Round(time.Millisecond), by)
	for name := range nodes {
		if by[name] < 10 {
			t.Errorf("node %s ran %d of the 40 jobs; want at least 10 each: %v", name, by[name], by)
		}
	}

	// A node lost mid-batch: its jobs run again on the other. A pod of its
	// own there, which no batch deletes, is failed by airlock node
	// controller once the killed node's lease expires.
	victim := nodes["airlock-b"]
	if _, err := cs.CoreV1().Pods("default").Create(ctx, pod("killed", victim.name, image, func(*corev1.Pod) {}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer cs.CoreV1().Pods("default").Delete(ctx, "killed", metav1.DeleteOptions{})
	waitPhase(t, cs, "killed", corev1.PodRunning)
	out = filepath.Join(dir, "lost.jsonl")
	c := batch(jobsFile("lost", 20, "3"), out)
	var progress bytes.Buffer
	c.Stderr = &progress
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Minute, "a batch pod running on "+victim.name, func() (bool, string) {
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "airlock.dev/run=true", FieldSelector: "spec.nodeName=" + victim.name + ",status.phase=Running"})
		return err == nil && len(list.Items) > 0, fmt.Sprint(err)
	})
	killed := time.Now()
	victim.cmd.Process.Kill()
	victim.cmd.Wait()
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("batch with a node lost: %v\n%s", err, progress.String())
		}
	case <-time.After(5 * time.Minute):
		c.Process.Kill()
		t.Fatalf("batch with a node lost did not end:\n%s", progress.String())
	}
	by = results(out, 20)
	t.Logf("20 jobs, node %s killed mid-batch: done %v after the kill, by node: %v", victim.name, time.Since(killed).Round(time.Millisecond), by)
	if !strings.Contains(progress.String(), "running it again") {
		t.Errorf("no job was run again after its node was lost:\n%s", progress.String())
	}
	if got := waitPhase(t, cs, "killed", corev1.PodFailed, corev1.PodSucceeded); got.Status.Reason != "AirlockNodeLost" {
		t.Errorf("pod killed, on node %s killed with SIGKILL: %s %s %q; want Failed AirlockNodeLost", victim.name, got.Status.Phase, got.Status.Reason, got.Status.Message)
	} else {
		t.Logf("pod killed failed %v after its node's kill: %s", time.Since(killed).Round(time.Millisecond), got.Status.Message)
	}
	// The node's restart ends the sandboxes its killed process left, and
	// `airlock reap` what a sandbox half made at the kill left (its cgroup).
	nodes[victim.name] = runNode(t, victim.name, victim.root)
	waitFor(t, 2*time.Minute, "no batch pod and no sandbox record left", func() (bool, string) {
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "airlock.dev/run=true"})
		left := 0
		for _, n := range nodes {
			left += len(n.sandboxes(t))
		}
		return err == nil && len(list.Items) == 0 && left == 0, fmt.Sprintf("%v, %d pods, %d sandboxes", err, len(list.Items), left)
	})
	if before := e2etest.Cgroups(); len(before) > 0 {
		t.Logf("cgroups left after the restart, before reap: %v", before)
	}
	airlock(t, victim.root, "reap")
	waitFor(t, time.Minute, "no batch pod, sandbox or cgroup left", func() (bool, string) {
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "airlock.dev/run=true"})
		if err != nil {
			return false, err.Error()
		}
		left := 0
		for _, n := range nodes {
			left += len(n.sandboxes(t))
		}
		cgroups := e2etest.Cgroups()
		return len(list.Items) == 0 && left == 0 && len(cgroups) == 0, fmt.Sprintf("%d pods, %d sandboxes, cgroups %v", len(list.Items), left, cgroups)
	})
}

// engineKube: `airlock sandbox create --engine kube` claims a sandbox
// from the warm pool kt through the airlock binary's own client (from a
// root of its own, standing for a laptop), airlock exec reaches it with
// stdin and exit codes, ls and inspect show it, what cannot reach it says
// so, and rm leaves no claim, pod or sandbox.
func engineKube(t *testing.T, cs *kubernetes.Clientset, nodes map[string]*node, trust string) {
	ctx := context.Background()
	client := filepath.Join(tmp, "client")
	if err := os.MkdirAll(client, 0o700); err != nil {
		t.Fatal(err)
	}
	run := func(stdin string, args ...string) (string, string, int) {
		c := exec.Command(airlockBin, append([]string{"--root", client}, args...)...)
		c.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig)
		c.Stdin = strings.NewReader(stdin)
		var out, errb bytes.Buffer
		c.Stdout, c.Stderr = &out, &errb
		err := c.Run()
		if _, ok := err.(*exec.ExitError); err != nil && !ok {
			t.Fatalf("airlock %v: %v", args, err)
		}
		return out.String(), errb.String(), c.ProcessState.ExitCode()
	}
	start := time.Now()
	out, progress, code := run("", "sandbox", "create", "--engine", "kube", "--template", "kt", "--label", "agent=e2e")
	id := strings.TrimSpace(out)
	if code != 0 || !strings.HasPrefix(id, "sb-") {
		t.Fatalf("sandbox create --engine kube: exit %d, %q\n%s", code, out, progress)
	}
	created := time.Since(start)
	if out, errs, code := run("", "exec", id, "--", "sh", "-c", "id -u; echo err >&2"); code != 0 || out != "65534\n" || errs != "err\n" {
		t.Errorf("exec id -u: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	t.Logf("--engine kube: created in %v, first exec done %v after create began", created.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	t.Logf("create's progress:\n%s", progress)
	if out, errs, code := run("", "exec", id, "--", "sh", "-c", "echo three; exit 3"); code != 3 || out != "three\n" {
		t.Errorf("exec exiting 3: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if out, errs, code := run("from stdin", "exec", "--stdin", "-", id, "--", "sh", "-c", "cat; echo; wc -c </dev/null"); code != 0 || out != "from stdin\n0\n" {
		t.Errorf("exec with stdin: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if out, _, code := run("", "exec", "--json", id, "--", "sh", "-c", "echo j; exit 5"); code != 5 || !strings.Contains(out, `"exit_code":5`) || !strings.Contains(out, `"engine":"kube"`) {
		t.Errorf("exec --json exiting 5: exit %d, %s", code, out)
	}
	if _, errs, code := run("", "exec", "--env", "A=1", id, "--", "true"); code != 64 || !strings.Contains(errs, "--env") {
		t.Errorf("exec --env on a cluster sandbox: exit %d, %s", code, errs)
	}
	if _, errs, code := run("", "sandbox", "pause", id); code == 0 || !strings.Contains(errs, "runs on Kubernetes") {
		t.Errorf("pause of a cluster sandbox: exit %d, %s", code, errs)
	}

	// cp, one file each way through the pod's exec; the scanner judges
	// what comes out.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "in.csv"), []byte("a,b\n1,2\n"), 0o600)
	if out, errs, code := run("", "cp", "--json", filepath.Join(dir, "in.csv"), id+":/home/user/data.csv"); code != 0 || !strings.Contains(out, `"decision":"accepted"`) {
		t.Errorf("cp up: exit %d, %s %s", code, out, errs)
	}
	if out, _, code := run("", "exec", id, "--", "sh", "-c", "cat data.csv; ln -s /etc/passwd link; cp /bin/sh prog; mkdir d"); code != 0 || out != "a,b\n1,2\n" {
		t.Errorf("the uploaded file: exit %d, %q", code, out)
	}
	if out, errs, code := run("", "cp", "--json", id+":/home/user/data.csv", dir+"/"); code != 0 || !strings.Contains(out, `"mime":"text/csv"`) {
		t.Errorf("cp down: exit %d, %s %s", code, out, errs)
	} else if b, _ := os.ReadFile(filepath.Join(dir, "data.csv")); string(b) != "a,b\n1,2\n" {
		t.Errorf("the downloaded file: %q", b)
	}
	for name, reason := range map[string]string{"link": "symlink", "prog": "type_not_allowed", "none": "not_found"} {
		out, errs, code := run("", "cp", "--json", id+":/home/user/"+name, filepath.Join(dir, name))
		if _, err := os.Lstat(filepath.Join(dir, name)); code != 65 || !strings.Contains(out, `"reason":"`+reason+`"`) || err == nil {
			t.Errorf("cp down of %s: exit %d, %s %s; want 65, %s, and no file left", name, code, out, errs, reason)
		}
	}
	kubeTrees(t, run, id, dir)

	// Every transfer, refusals included, is in the audit log of the root
	// that made it, as a local sandbox's are.
	audit := map[string]int{}
	b, _ := os.ReadFile(filepath.Join(client, "audit.jsonl"))
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		var ev struct {
			Event, Path, Decision, Reason string
			SandboxID                     string `json:"sandbox_id"`
		}
		json.Unmarshal([]byte(line), &ev)
		if ev.Event == "transfer" && ev.SandboxID == id {
			audit[ev.Path+" "+ev.Decision+" "+ev.Reason]++
		}
	}
	for _, want := range []string{"/home/user/data.csv accepted ", "/home/user/link refused symlink", "/home/user/prog refused type_not_allowed", "/home/user/none refused not_found"} {
		if audit[want] == 0 {
			t.Errorf("no audit record %q of sandbox %s's transfers in %s: %v", want, id, filepath.Join(client, "audit.jsonl"), audit)
		}
	}

	// ls and inspect show it, and where it runs: a pod on an airlock node,
	// a gVisor sandbox there.
	out, _, _ = run("", "sandbox", "ls", "--json")
	var list []runner.SandboxInfo
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 1 || list[0].ID != id || list[0].Engine != "kube" || list[0].State != "ready" ||
		list[0].Isolation != "gvisor" || list[0].Labels["agent"] != "e2e" {
		t.Errorf("sandbox ls --json: %v: %s", err, out)
	}
	out, _, _ = run("", "sandbox", "inspect", id)
	var rec struct{ Namespace, Claim, Pod, Node, Server string }
	if err := json.Unmarshal([]byte(out), &rec); err != nil || rec.Claim != id || nodes[rec.Node] == nil {
		t.Fatalf("sandbox inspect: %v: %s", err, out)
	}
	p, err := cs.CoreV1().Pods(rec.Namespace).Get(ctx, rec.Pod, metav1.GetOptions{})
	if err != nil || p.Spec.NodeName != rec.Node {
		t.Fatalf("the claim's pod %s: %v", rec.Pod, err)
	}
	on := nodes[rec.Node]
	if si, ok := on.sandboxes(t)[string(p.UID)]; !ok || si.Isolation != "gvisor" {
		t.Errorf("pod %s has no gVisor sandbox on %s: %+v", p.Name, on.name, si)
	}

	// run --engine kube: one pod of the template, its end and log the
	// result, deleted after.
	start = time.Now()
	if out, errs, code := run("", "run", "--engine", "kube", "--template", "kt", "--", "sh", "-c", "echo hi; id -u; echo oops >&2; exit 3"); code != 3 || out != "hi\n65534\n" || !strings.HasSuffix(errs, "oops\n") {
		t.Errorf("run --engine kube: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	t.Logf("run --engine kube: %v from the command's start to its end, the pod deleted", time.Since(start).Round(time.Millisecond))
	// Its result is the one the node signed: the node's engine, separate
	// streams, and a receipt.
	if out, errs, code := run("", "run", "--json", "--engine", "kube", "--template", "kt", "--", "sh", "-c", "echo ok"); code != 0 ||
		!strings.Contains(out, `"reason":"exited"`) || !strings.Contains(out, `"engine":"oci"`) || !strings.Contains(out, `"exit_code":0`) || !strings.Contains(out, `"receipt":`) {
		t.Errorf("run --json --engine kube: exit %d, %s %s", code, out, errs)
	}
	// A Result too large for the pod's status (512 KiB) is cut to fit by
	// its node and signed again: it names its pod, and verifies.
	big, errs, code := run("", "run", "--json", "--engine", "kube", "--template", "kt", "--", "sh", "-c", "head -c 800000 /dev/zero | tr '\\0' x")
	var res runner.Result
	if err := json.Unmarshal([]byte(big), &res); code != 0 || err != nil || !res.Stdout.Truncated || res.Stdout.Bytes != 800000 ||
		res.Receipt == nil || res.Receipt.Receipt.PodUID == "" || len(big) > 600<<10 {
		t.Errorf("run --json --engine kube of 800000 bytes: exit %d, %v, %d bytes of result: %.300s %s", code, err, len(big), big, errs)
	} else {
		f := filepath.Join(t.TempDir(), "big.json")
		os.WriteFile(f, []byte(big), 0o600)
		if out, errs, code := run("", "receipt", "verify", "--trust", trust, f); code != 0 || !strings.Contains(out, "pod UID "+res.Receipt.Receipt.PodUID) {
			t.Errorf("receipt verify of the cut Result: exit %d, %s %s", code, out, errs)
		}
	}
	if _, errs, code := run("", "run", "--engine", "kube", "--template", "nope", "--", "true"); code != 66 || !strings.Contains(errs, "airlock kube render --template nope") {
		t.Errorf("run --engine kube on no template: exit %d, %s", code, errs)
	}
	waitFor(t, time.Minute, "no one-shot pod left", func() (bool, string) {
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "airlock.dev/run=true"})
		return err == nil && len(list.Items) == 0, fmt.Sprintf("%v %d pods", err, len(list.Items))
	})

	// rm deletes the claim, and with it the pod and its sandbox.
	if out, errs, code := run("", "sandbox", "rm", id); code != 0 || strings.TrimSpace(out) != id {
		t.Fatalf("sandbox rm: exit %d, %s %s", code, out, errs)
	}
	if out := kubectlOut(t, "get", "sandboxclaim", id); !strings.Contains(out, "NotFound") {
		t.Errorf("the claim after rm: %s", out)
	}
	waitFor(t, time.Minute, "the claim's pod and its sandbox gone", func() (bool, string) {
		_, err := cs.CoreV1().Pods(rec.Namespace).Get(ctx, rec.Pod, metav1.GetOptions{})
		_, left := on.sandboxes(t)[string(p.UID)]
		return err != nil && strings.Contains(err.Error(), "not found") && !left, fmt.Sprintf("pod: %v, sandbox left: %v", err, left)
	})
	if out, _, _ := run("", "sandbox", "ls", "--json"); strings.TrimSpace(out) != "[]" {
		t.Errorf("sandbox ls after rm: %s", out)
	}
	if _, _, code := run("", "sandbox", "rm", id); code != 0 {
		t.Errorf("a second rm: exit %d", code)
	}
	if _, errs, code := run("", "exec", id, "--", "true"); code != 66 {
		t.Errorf("exec after rm: exit %d, %s", code, errs)
	}
}

// pod is a pod for node, valid for an airlock node but for what mutate
// changes.
func pod(name, node, image string, mutate func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                     node,
			RuntimeClassName:             ptr("gvisor"),
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr(false),
			Tolerations:                  []corev1.Toleration{{Key: "airlock.dev/sandbox", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			Containers:                   []corev1.Container{{Name: "main", Image: image, Command: []string{"sleep", "600"}}},
		},
	}
	mutate(p)
	return p
}

// waitPhase waits until pod name is in one of phases.
func waitPhase(t testing.TB, cs *kubernetes.Clientset, name string, phases ...corev1.PodPhase) *corev1.Pod {
	t.Helper()
	var got *corev1.Pod
	waitFor(t, 2*time.Minute, "pod "+name+" ends", func() (bool, string) {
		p, err := cs.CoreV1().Pods("default").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got = p
		for _, ph := range phases {
			if p.Status.Phase == ph && len(p.Status.ContainerStatuses) == 1 {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%s %s", p.Status.Phase, p.Status.Message)
	})
	return got
}

func ptr[T any](v T) *T { return &v }

// klogLine is a line kubectl logs of its own (klog's header: severity,
// date, time, pid, file:line]).
var klogLine = regexp.MustCompile(`(?m)^[EWI]\d{4} \d{2}:\d{2}:\d{2}\.\d+ +\d+ [^ \]]+\] .*\n`)

// kubeTrees copies directory trees in and out of cluster sandbox id,
// entry by entry through its pod's exec: a host symlink is refused on
// the way in and the rest arrives; on the way out (a directory's
// contents, with /.) a symlink, a binary and a dot-named directory are
// refused, and only what passed reaches the host.
func kubeTrees(t *testing.T, run func(stdin string, args ...string) (string, string, int), id, dir string) {
	t.Helper()
	up := filepath.Join(dir, "up")
	os.MkdirAll(filepath.Join(up, "sub"), 0o755)
	os.WriteFile(filepath.Join(up, "a.txt"), []byte("alpha\n"), 0o600)
	os.WriteFile(filepath.Join(up, "sub", "b.csv"), []byte("x,y\n"), 0o600)
	os.Symlink("/etc/passwd", filepath.Join(up, "link"))
	var rep runner.TreeReport
	out, errs, code := run("", "cp", "--json", up, id+":/home/user/")
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 65 || rep.Summary.Files != 2 || rep.Summary.Dirs != 1 || rep.Summary.Refused != 1 {
		t.Errorf("cp of a tree up: exit %d, %v: %s %s; want 65, 2 files, 1 directory, the symlink refused", code, err, out, errs)
	}
	if out, _, code := run("", "exec", id, "--", "sh", "-c", "cat up/a.txt up/sub/b.csv; [ -e up/link ] || echo no-link"); code != 0 || out != "alpha\nx,y\nno-link\n" {
		t.Errorf("the uploaded tree: exit %d, %q", code, out)
	}

	mk := "mkdir -p out/deep out/.hidden && echo r >out/r.txt && echo s,t >out/deep/s.csv && echo k >out/.hidden/k.txt && cp /bin/sh out/bin && ln -s /etc/passwd out/ln"
	if _, errs, code := run("", "exec", id, "--", "sh", "-c", mk); code != 0 {
		t.Fatalf("making a tree in the sandbox: exit %d: %s", code, errs)
	}
	got := filepath.Join(dir, "got")
	out, errs, code = run("", "cp", "--json", id+":/home/user/out/.", got)
	rep = runner.TreeReport{}
	if err := json.Unmarshal([]byte(out), &rep); err != nil || code != 65 || rep.Summary.Files != 2 || rep.Summary.Dirs != 1 || rep.Summary.Refused != 3 {
		t.Errorf("cp of a tree down: exit %d, %v: %s %s; want 65, 2 files, 1 directory, 3 refused", code, err, out, errs)
	}
	reasons := map[string]string{}
	for _, tr := range rep.Transfers {
		reasons[tr.Path] = string(tr.Reason)
	}
	for p, want := range map[string]string{"/home/user/out/.hidden": "hidden_name", "/home/user/out/bin": "type_not_allowed", "/home/user/out/ln": "symlink",
		"/home/user/out/r.txt": "", "/home/user/out/deep/s.csv": ""} {
		if r, ok := reasons[p]; !ok || r != want {
			t.Errorf("%s: reason %q (listed %v), want %q", p, r, ok, want)
		}
	}
	for p, want := range map[string]string{"r.txt": "r\n", "deep/s.csv": "s,t\n"} {
		if b, err := os.ReadFile(filepath.Join(got, p)); err != nil || string(b) != want {
			t.Errorf("the downloaded %s: %q, %v", p, b, err)
		}
	}
	for _, p := range []string{".hidden", "bin", "ln"} {
		if _, err := os.Lstat(filepath.Join(got, p)); err == nil {
			t.Errorf("the refused %s reached the host", p)
		}
	}
}
