package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// The components, in the order they start; Down stops them in reverse.
const (
	Etcd              = "etcd"
	APIServer         = "kube-apiserver"
	ControllerManager = "kube-controller-manager"
	Scheduler         = "kube-scheduler"
	AgentSandbox      = "agent-sandbox-controller"
)

// Components lists every process of the control plane, in start order.
var Components = []string{Etcd, APIServer, ControllerManager, Scheduler, AgentSandbox}

// The ports, by name in run/ports.
const (
	portEtcd         = "etcd"
	portEtcdPeer     = "etcd-peer"
	portAPIServer    = "kube-apiserver"
	portCM           = "kube-controller-manager"
	portScheduler    = "kube-scheduler"
	portAgentSandbox = "agent-sandbox-controller-probe"
)

var portNames = []string{portEtcd, portEtcdPeer, portAPIServer, portCM, portScheduler, portAgentSandbox}

// serviceCIDR is the apiserver's service range. Nothing routes it: there is
// no kubelet, no proxy and no pod network.
const serviceCIDR = "10.96.0.0/16"

// Options tune Up.
type Options struct {
	// Timeout bounds the wait for readiness after the binaries are built.
	Timeout time.Duration
}

// Up starts the control plane from b, unless it is up already, and waits
// until it is ready: the apiserver's /readyz answers, agent-sandbox's CRDs
// are Established, the default namespace has its default service account,
// and every controller answers its health check. It reports whether the
// control plane was up already.
func Up(ctx context.Context, l Layout, b Binaries, o Options, logf Logf) (already bool, err error) {
	if o.Timeout <= 0 {
		o.Timeout = 3 * time.Minute
	}
	if _, err := os.Stat(l.Run()); err == nil {
		err := Ready(ctx, l)
		if err == nil {
			started, rerr := os.ReadFile(l.BinariesFile())
			if rerr == nil && string(started) == b.list() {
				return true, nil
			}
			logf("the running control plane is not from the binaries built now: stopping it")
		} else {
			logf("an earlier control plane is not all up (%v): stopping what is left of it", err)
		}
		if err := Down(ctx, l, logf); err != nil {
			return false, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	if err := up(ctx, l, b, logf); err != nil {
		logf("stopping what was started; the logs stay in %s until kube-down", l.LogDir())
		if serr := stopAll(context.WithoutCancel(ctx), l, logf); serr != nil {
			err = errors.Join(err, serr)
		}
		return false, err
	}
	return false, nil
}

func up(ctx context.Context, l Layout, b Binaries, logf Logf) error {
	for _, d := range []string{l.Dir, l.Run(), l.PKI(), l.Conf(), l.LogDir(), l.PidDir(), l.KubectlDir(),
		filepath.Join(l.Run(), "etcd"), filepath.Join(l.Run(), "certs")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return err
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return err
		}
	}
	if err := writeFile0600(l.BinariesFile(), []byte(b.list())); err != nil {
		return err
	}
	if err := os.Symlink(b.Kubectl, l.Kubectl()); err != nil {
		return err
	}
	ports, err := pickPorts(portNames)
	if err != nil {
		return err
	}
	if err := writePorts(l, ports); err != nil {
		return err
	}
	logf("ports on 127.0.0.1: %s", formatPorts(ports))

	if err := writePKI(l, ports); err != nil {
		return fmt.Errorf("writing the certificates: %w", err)
	}
	api := "https://127.0.0.1:" + strconv.Itoa(ports[portAPIServer])
	client, err := clientFor(l, "admin")
	if err != nil {
		return err
	}
	env := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=" + l.Run()}
	url := func(p string) string { return "https://127.0.0.1:" + strconv.Itoa(ports[p]) }
	pki := func(name string) string { return filepath.Join(l.PKI(), name) }
	certDir := func(name string) string { return filepath.Join(l.Run(), "certs", name) }

	// etcd, with TLS and client certificates on both of its listeners.
	etcdPeer := url(portEtcdPeer)
	pid, err := start(l, Etcd, b.Etcd, []string{
		"--name=airlock", "--data-dir=" + filepath.Join(l.Run(), "etcd"),
		"--listen-client-urls=" + url(portEtcd), "--advertise-client-urls=" + url(portEtcd),
		"--listen-peer-urls=" + etcdPeer, "--initial-advertise-peer-urls=" + etcdPeer,
		"--initial-cluster=airlock=" + etcdPeer, "--initial-cluster-state=new",
		"--cert-file=" + pki("etcd-server.crt"), "--key-file=" + pki("etcd-server.key"),
		"--client-cert-auth", "--trusted-ca-file=" + pki("ca.crt"),
		"--peer-cert-file=" + pki("etcd-peer.crt"), "--peer-key-file=" + pki("etcd-peer.key"),
		"--peer-client-cert-auth", "--peer-trusted-ca-file=" + pki("ca.crt"),
	}, env)
	if err != nil {
		return err
	}
	etcdClient, err := clientFor(l, "apiserver-etcd-client")
	if err != nil {
		return err
	}
	if err := waitFor(ctx, l, Etcd, pid, func(ctx context.Context) error {
		return getOK(ctx, etcdClient, url(portEtcd)+"/health")
	}); err != nil {
		return err
	}
	logf("etcd ready (pid %d)", pid)

	pid, err = start(l, APIServer, b.APIServer, []string{
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(ports[portAPIServer]),
		"--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
		"--etcd-servers=" + url(portEtcd), "--etcd-cafile=" + pki("ca.crt"),
		"--etcd-certfile=" + pki("apiserver-etcd-client.crt"), "--etcd-keyfile=" + pki("apiserver-etcd-client.key"),
		"--tls-cert-file=" + pki("apiserver.crt"), "--tls-private-key-file=" + pki("apiserver.key"),
		"--client-ca-file=" + pki("ca.crt"), "--anonymous-auth=false",
		// Nodes (airlock node) reach only their own Node, lease and pods.
		"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction",
		"--service-cluster-ip-range=" + serviceCIDR,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pki("sa.pub"), "--service-account-signing-key-file=" + pki("sa.key"),
		// Privileged pods pass the API, as in most clusters, so that
		// airlock node's own refusal of them is what is tested.
		"--allow-privileged=true",
		// kubectl logs and exec through airlock nodes: the API server's
		// client certificate, and the CA it checks the nodes' by.
		"--kubelet-client-certificate=" + pki("apiserver-kubelet-client.crt"), "--kubelet-client-key=" + pki("apiserver-kubelet-client.key"),
		"--kubelet-certificate-authority=" + pki("ca.crt"), "--kubelet-preferred-address-types=InternalIP", "--profiling=false", "--cert-dir=" + certDir(APIServer),
	}, env)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, l, APIServer, pid, func(ctx context.Context) error {
		return getOK(ctx, client, api+"/readyz")
	}); err != nil {
		return err
	}
	logf("kube-apiserver ready at %s (pid %d)", api, pid)

	cmConf, schedConf := filepath.Join(l.Conf(), ControllerManager+".kubeconfig"), filepath.Join(l.Conf(), Scheduler+".kubeconfig")
	cmPid, err := start(l, ControllerManager, b.ControllerManager, []string{
		"--kubeconfig=" + cmConf, "--authentication-kubeconfig=" + cmConf, "--authorization-kubeconfig=" + cmConf,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(ports[portCM]),
		"--tls-cert-file=" + pki("kube-controller-manager-serving.crt"),
		"--tls-private-key-file=" + pki("kube-controller-manager-serving.key"),
		"--cert-dir=" + certDir(ControllerManager), "--leader-elect=false",
		"--service-account-private-key-file=" + pki("sa.key"), "--root-ca-file=" + pki("ca.crt"),
		"--use-service-account-credentials=true", "--profiling=false",
		// A node whose lease is 20 s past its renewal (every 10 s) is
		// marked not Ready: a lost node's batch jobs move sooner than the
		// default's 50 s.
		"--node-monitor-grace-period=20s",
		// Else it creates /usr/libexec/kubernetes/kubelet-plugins/volume/exec.
		"--flex-volume-plugin-dir=" + filepath.Join(l.Run(), "flexvolume"),
	}, env)
	if err != nil {
		return err
	}
	schedPid, err := start(l, Scheduler, b.Scheduler, []string{
		"--kubeconfig=" + schedConf, "--authentication-kubeconfig=" + schedConf, "--authorization-kubeconfig=" + schedConf,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(ports[portScheduler]),
		"--tls-cert-file=" + pki("kube-scheduler-serving.crt"), "--tls-private-key-file=" + pki("kube-scheduler-serving.key"),
		"--cert-dir=" + certDir(Scheduler), "--leader-elect=false", "--profiling=false",
	}, env)
	if err != nil {
		return err
	}

	if err := installCRDs(ctx, l, b); err != nil {
		return err
	}
	names, err := crdNames(b.CRDs)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, l, APIServer, 0, func(ctx context.Context) error {
		for _, n := range names {
			if err := established(ctx, client, api, n); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}
	logf("CRDs established: %s", strings.Join(names, ", "))

	asPid, err := start(l, AgentSandbox, b.AgentSandbox, []string{
		"--extensions", "--leader-elect=false", "--metrics-bind-address=0",
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(ports[portAgentSandbox]),
	}, append(env, "KUBECONFIG="+filepath.Join(l.Conf(), AgentSandbox+".kubeconfig")))
	if err != nil {
		return err
	}
	plain := &http.Client{Timeout: 5 * time.Second}
	for _, w := range []struct {
		name, what string
		pid        int
		ok         func(context.Context) error
	}{
		{ControllerManager, "kube-controller-manager", cmPid, func(ctx context.Context) error { return getOK(ctx, client, url(portCM)+"/healthz") }},
		{Scheduler, "kube-scheduler", schedPid, func(ctx context.Context) error { return getOK(ctx, client, url(portScheduler)+"/healthz") }},
		{AgentSandbox, "agent-sandbox-controller", asPid, func(ctx context.Context) error {
			return getOK(ctx, plain, "http://127.0.0.1:"+strconv.Itoa(ports[portAgentSandbox])+"/readyz")
		}},
		// The service-account controller of kube-controller-manager
		// creates it, and its token controller can then sign for it.
		{ControllerManager, "the default service account", cmPid, func(ctx context.Context) error {
			return getOK(ctx, client, api+"/api/v1/namespaces/default/serviceaccounts/default")
		}},
	} {
		if err := waitFor(ctx, l, w.name, w.pid, w.ok); err != nil {
			return err
		}
		logf("%s ready", w.what)
	}
	return nil
}

// writePKI writes the CA, every certificate, the service-account key pair
// and the kubeconfigs.
func writePKI(l Layout, ports map[string]int) error {
	c, err := newCA(l.PKI())
	if err != nil {
		return err
	}
	loop := []net.IP{net.IPv4(127, 0, 0, 1)}
	specs := []certSpec{
		{name: "etcd-server", cn: "etcd", server: true, ips: loop, dns: []string{"localhost"}},
		{name: "etcd-peer", cn: "etcd-peer", server: true, client: true, ips: loop, dns: []string{"localhost"}},
		{name: "apiserver-etcd-client", cn: "kube-apiserver-etcd-client", client: true},
		{name: "apiserver", cn: "kube-apiserver", server: true,
			// 10.96.0.1 is the kubernetes service's address in serviceCIDR.
			ips: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv4(10, 96, 0, 1)},
			dns: []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"}},
		{name: "admin", cn: "airlock-kube-admin", orgs: []string{"system:masters"}, client: true},
		{name: "apiserver-kubelet-client", cn: "kube-apiserver-kubelet-client", client: true},
		{name: ControllerManager, cn: "system:kube-controller-manager", client: true},
		{name: Scheduler, cn: "system:kube-scheduler", client: true},
		{name: AgentSandbox, cn: "agent-sandbox-controller", client: true},
		{name: ControllerManager + "-serving", cn: "kube-controller-manager", server: true, ips: loop, dns: []string{"localhost"}},
		{name: Scheduler + "-serving", cn: "kube-scheduler", server: true, ips: loop, dns: []string{"localhost"}},
	}
	for _, s := range specs {
		if err := c.issue(s); err != nil {
			return err
		}
	}
	if err := writeServiceAccountKeys(l.PKI()); err != nil {
		return fmt.Errorf("writing the service-account key pair: %w", err)
	}
	api := "https://127.0.0.1:" + strconv.Itoa(ports[portAPIServer])
	for _, n := range []string{ControllerManager, Scheduler, AgentSandbox} {
		if err := c.writeKubeconfig(filepath.Join(l.Conf(), n+".kubeconfig"), api, n); err != nil {
			return err
		}
	}
	if err := c.writeKubeconfig(l.Kubeconfig(), api, "admin"); err != nil {
		return err
	}
	return nil
}

// agentSandboxBindings binds agent-sandbox's own ClusterRoles to the user
// its client certificate names; the API server's kubelet client to the
// kubelet API (kubectl logs and exec through nodes); and the nodes to
// TokenReviews and SubjectAccessReviews, with which an airlock node asks
// the API server who may use its API.
const agentSandboxBindings = `{"apiVersion": "v1", "kind": "List", "items": [
  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
   "metadata": {"name": "airlock-agent-sandbox-controller"},
   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "agent-sandbox-controller"},
   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "agent-sandbox-controller"}]},
  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
   "metadata": {"name": "airlock-agent-sandbox-controller-extensions"},
   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "agent-sandbox-controller-extensions"},
   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "agent-sandbox-controller"}]},
  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
   "metadata": {"name": "airlock-apiserver-kubelet-client"},
   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:kubelet-api-admin"},
   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "kube-apiserver-kubelet-client"}]},
  {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
   "metadata": {"name": "airlock-nodes-auth-delegator"},
   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:auth-delegator"},
   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}]}
]}`

// installCRDs applies agent-sandbox's CRDs and ClusterRoles, as its module
// ships them, and the bindings for its controller.
func installCRDs(ctx context.Context, l Layout, b Binaries) error {
	kubectl := l.Kubectl()
	args := []string{"--kubeconfig=" + l.Kubeconfig(), "--cache-dir=" + filepath.Join(l.Run(), "kubectl-cache"),
		"apply", "--server-side", "--force-conflicts", "--field-manager=airlock-kube"}
	for _, f := range append(append([]string{}, b.CRDs...), b.RBAC...) {
		args = append(args, "-f", f)
	}
	args = append(args, "-f", "-")
	cmd := exec.CommandContext(ctx, kubectl, args...)
	cmd.Dir = l.Run()
	cmd.Env = append(os.Environ(), "HOME="+l.Run())
	cmd.Stdin = strings.NewReader(agentSandboxBindings)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("applying agent-sandbox's CRDs and RBAC with %s: %w: %s", kubectl, err, bytes.TrimSpace(out))
	}
	return nil
}

// crdNames turns agent-sandbox's CRD file names (<group>_<plural>.yaml)
// into CRD names (<plural>.<group>).
func crdNames(files []string) ([]string, error) {
	var names []string
	for _, f := range files {
		group, plural, ok := strings.Cut(strings.TrimSuffix(filepath.Base(f), ".yaml"), "_")
		if !ok {
			return nil, fmt.Errorf("CRD file %s is not named <group>_<plural>.yaml", f)
		}
		names = append(names, plural+"."+group)
	}
	if len(names) == 0 {
		return nil, errors.New("agent-sandbox ships no CRDs")
	}
	return names, nil
}

func established(ctx context.Context, client *http.Client, api, name string) error {
	body, err := get(ctx, client, api+"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"+name)
	if err != nil {
		return err
	}
	var crd struct {
		Status struct {
			Conditions []struct{ Type, Status string }
		}
	}
	if err := json.Unmarshal(body, &crd); err != nil {
		return fmt.Errorf("reading CRD %q: %w", name, err)
	}
	for _, c := range crd.Status.Conditions {
		if c.Type == "Established" && c.Status == "True" {
			return nil
		}
	}
	return fmt.Errorf("CRD %q is not Established yet", name)
}

// waitFor polls ok until it succeeds, the process pid (if not 0) exits, or
// ctx ends; the error names the component's log.
func waitFor(ctx context.Context, l Layout, name string, pid int, ok func(context.Context) error) error {
	var last error
	for {
		try, cancel := context.WithTimeout(ctx, 5*time.Second)
		last = ok(try)
		cancel()
		if last == nil {
			return nil
		}
		if pid != 0 && !alive(pid) {
			return fmt.Errorf("%s (pid %d) exited before it was ready: %v; see %s", name, pid, last, l.Log(name))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s not ready in time: %v; see %s", name, last, l.Log(name))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func getOK(ctx context.Context, client *http.Client, url string) error {
	_, err := get(ctx, client, url)
	return err
}

func get(ctx context.Context, client *http.Client, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	return body, nil
}

// pickPorts asks the kernel for a free port on 127.0.0.1 for each name,
// holding them all open until every one is picked so that they differ.
func pickPorts(names []string) (map[string]int, error) {
	ports := map[string]int{}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for _, n := range names {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("picking a free port on 127.0.0.1: %w", err)
		}
		ls = append(ls, l)
		ports[n] = l.Addr().(*net.TCPAddr).Port
	}
	return ports, nil
}

func writePorts(l Layout, ports map[string]int) error {
	var b strings.Builder
	for _, n := range portNames {
		fmt.Fprintf(&b, "%s %d\n", n, ports[n])
	}
	return writeFile0600(l.PortsFile(), []byte(b.String()))
}

// ReadPorts returns the ports recorded in run/ports.
func ReadPorts(l Layout) (map[string]int, error) {
	b, err := os.ReadFile(l.PortsFile())
	if err != nil {
		return nil, err
	}
	ports := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		name, p, ok := strings.Cut(line, " ")
		port, err := strconv.Atoi(p)
		if !ok || err != nil {
			return nil, fmt.Errorf("%s: bad line %q", l.PortsFile(), line)
		}
		ports[name] = port
	}
	return ports, nil
}

func formatPorts(ports map[string]int) string {
	var parts []string
	for n, p := range ports {
		parts = append(parts, fmt.Sprintf("%s %d", n, p))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}
