// Package node makes an airlock machine a Kubernetes node: it registers
// a Node, renews its lease, and runs each pod the scheduler binds to it as
// an airlock sandbox through the service layer, on the virtual-kubelet
// library.
//
// Rules:
//   - A pod is admitted whole or refused (Admit): a field the node cannot
//     honour fails the pod with a message naming the field, and nothing
//     of it starts. Nothing is dropped.
//   - A pod is one sandbox; its one container's program is one exec in
//     it, living as long as the pod. The pod ends with the program, with
//     airlock's reason word in the container's terminated state, and its
//     sandbox ends then too.
//   - The node never pulls: an image it does not hold fails the pod.
//   - The node reads only its own pods (a field selector on its name) and
//     no secret, config map or service.
//   - A restarted node ends every sandbox its last process left, and
//     fails their pods rather than run a program twice.
//   - The cluster's word on a pod's end is final: a pod that airlock's
//     cluster controller failed while the node was cut off has its
//     sandbox ended when the node hears of it.
package node

import (
	"context"
	"crypto/ed25519"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	vknode "github.com/virtual-kubelet/virtual-kubelet/node"
	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	"github.com/virtual-kubelet/virtual-kubelet/node/nodeutil"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/kube"
	"github.com/airlock-sandbox/airlock/kube/cluster"
	"github.com/airlock-sandbox/airlock/receipt"
)

// NodeLabel marks a Node as airlock's.
const NodeLabel = "airlock.dev/node"

// KeyAnnotation holds, on an airlock node's Node, the base64 ed25519 public
// key its receipts are signed with: `airlock receipt verify --trust` takes
// a file of these, and `airlock run` and `batch --engine kube` hold a
// pod's Result to its node's.
const KeyAnnotation = cluster.AnnotationReceiptKey

// Config is one node's.
type Config struct {
	// Kubeconfig holds the node's cluster credentials; it must not be
	// readable by group or others.
	Kubeconfig string
	// Name is the Node's name; Address its InternalIP.
	Name, Address string
	// MaxSandboxes is the node's pod capacity.
	MaxSandboxes int
	// Root is airlock's root, whose file system's size is the node's
	// ephemeral storage.
	Root string
	// Version is airlock's, shown as the node's kubelet version.
	Version string
	// Port is where the node serves kubectl logs and exec to the API
	// server (the kubelet's API), over TLS with TLSCert and TLSKey; only a
	// client whose certificate ClientCA signed, or whose token the API
	// server vouches for, and whom the API server allows nodes/proxy (a
	// SubjectAccessReview), is served. 0 serves nothing.
	Port                      int
	TLSCert, TLSKey, ClientCA string
	// LeaseDuration is how long each renewal of the node's lease holds
	// (renewed every quarter of it); 0 is 40 s, a kubelet's. Once it has
	// passed unrenewed, airlock's cluster controller fails the node's
	// pods (see package kube/controller).
	LeaseDuration time.Duration
	Provider      ProviderConfig
	Log           *slog.Logger
}

// Run registers the node and runs its pods until ctx ends; ready, when not
// nil, is called once the node is registered and its pods are watched.
func Run(ctx context.Context, c Config, ready func()) error {
	client, err := Client(c.Kubeconfig)
	if err != nil {
		return err
	}
	c.Provider.Node, c.Provider.HostIP, c.Provider.Log = c.Name, c.Address, c.Log
	prov, err := NewProvider(ctx, c.Provider)
	if err != nil {
		return err
	}
	obj, err := nodeObject(c)
	if err != nil {
		return err
	}
	lease := int32(c.LeaseDuration / time.Second)
	if lease == 0 {
		lease = vknode.DefaultLeaseDuration
	}
	if lease < 4 {
		return fmt.Errorf("%w: --lease-duration %v: give at least 4s (the lease is renewed every quarter of it)", errdefs.ErrInvalidArgument, c.LeaseDuration)
	}
	nc, err := vknode.NewNodeController(vknode.NewNaiveNodeProvider(), obj, client.CoreV1().Nodes(),
		vknode.WithNodeEnableLeaseV1(client.CoordinationV1().Leases(corev1.NamespaceNodeLease), lease))
	if err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrInternal, err)
	}

	// Only this node's pods; the other informers are required by the pod
	// controller but never started: a pod's env is never resolved through
	// the API (Admit refuses valueFrom), so the node lists no secret.
	pods := informers.NewSharedInformerFactoryWithOptions(client, time.Minute, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", c.Name).String()
	}))
	// A pod the cluster ended while the node still runs it (its lease
	// expired, the node cut off) ends here too, once the node hears.
	endedElsewhere := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			prov.EndedElsewhere(ctx, p)
		}
	}
	if _, err := pods.Core().V1().Pods().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    endedElsewhere,
		UpdateFunc: func(_, obj any) { endedElsewhere(obj) },
	}); err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrInternal, err)
	}
	unused := informers.NewSharedInformerFactory(client, 0)
	eb := record.NewBroadcaster()
	defer eb.Shutdown()
	eb.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	pc, err := vknode.NewPodController(vknode.PodControllerConfig{
		PodClient:                 client.CoreV1(),
		PodInformer:               pods.Core().V1().Pods(),
		EventRecorder:             eb.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "airlock-node", Host: c.Name}),
		Provider:                  prov,
		ConfigMapInformer:         unused.Core().V1().ConfigMaps(),
		SecretInformer:            unused.Core().V1().Secrets(),
		ServiceInformer:           unused.Core().V1().Services(),
		SkipDownwardAPIResolution: true,
	})
	if err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrInternal, err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go nc.Run(ctx)
	select {
	case <-nc.Ready():
	case <-nc.Done():
		return fmt.Errorf("%w: registering node %s: %v", errdefs.ErrUnavailable, c.Name, nc.Err())
	case <-ctx.Done():
		return ctx.Err()
	}
	c.Log.Info("node registered", "node", c.Name)
	pods.Start(ctx.Done())
	go pc.Run(ctx, max(2, runtime.NumCPU()))
	select {
	case <-pc.Ready():
	case <-pc.Done():
		return fmt.Errorf("%w: watching node %s's pods: %v", errdefs.ErrUnavailable, c.Name, pc.Err())
	case <-ctx.Done():
		return ctx.Err()
	}
	c.Log.Info("watching pods", "node", c.Name)
	srvErr := make(chan error, 1)
	if c.Port != 0 {
		srv, err := kubeletAPI(client, c, prov)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(c.Address, strconv.Itoa(c.Port)))
		if err != nil {
			return fmt.Errorf("%w: serving kubectl logs and exec: %v", errdefs.ErrUnavailable, err)
		}
		go func() { srvErr <- srv.ServeTLS(ln, "", "") }()
		defer srv.Close()
		c.Log.Info("serving kubectl logs and exec", "addr", ln.Addr().String())
	}
	if ready != nil {
		ready()
	}
	select {
	case <-ctx.Done():
	case err := <-srvErr:
		return fmt.Errorf("%w: serving kubectl logs and exec: %v", errdefs.ErrUnavailable, err)
	case <-nc.Done():
		if err := nc.Err(); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("%w: node %s: %v", errdefs.ErrUnavailable, c.Name, err)
		}
	case <-pc.Done():
		if err := pc.Err(); err != nil && !errors.Is(err, context.Canceled) {
			return fmt.Errorf("%w: node %s's pods: %v", errdefs.ErrUnavailable, c.Name, err)
		}
	}
	return nil
}

// Client reads a kubeconfig that only its owner may read.
func Client(path string) (*kubernetes.Clientset, error) { return ClientAs(path, "airlock-node") }

// ClientAs is Client, naming itself agent to the API server. It refuses
// what package cluster refuses of a kubeconfig and client-go would
// honour (see refused).
func ClientAs(path, agent string) (*kubernetes.Clientset, error) {
	if path == "" {
		return nil, fmt.Errorf("%w: no kubeconfig: give --kubeconfig FILE or set KUBECONFIG", errdefs.ErrInvalidArgument)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: kubeconfig: %v: give the kubeconfig with --kubeconfig FILE or KUBECONFIG", errdefs.ErrInvalidArgument, err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%w: kubeconfig %s is readable by others (mode %04o): it holds the node's credentials; chmod 600 it", errdefs.ErrInvalidArgument, path, fi.Mode().Perm())
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("%w: kubeconfig %s: %v", errdefs.ErrInvalidArgument, path, err)
	}
	if why := refused(cfg); why != "" {
		return nil, fmt.Errorf("%w: kubeconfig %s: %s", errdefs.ErrInvalidArgument, path, why)
	}
	cfg.UserAgent = agent
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: kubeconfig %s: %v", errdefs.ErrInvalidArgument, path, err)
	}
	return cs, nil
}

// refused says why cfg, a kubeconfig's context as client-go reads it, is
// refused, as package cluster refuses it: a server without TLS, or one
// not verified (either would carry the credentials, which may change any
// pod's status, to whoever answers), an exec credential plugin (a
// program client-go would run) or an auth provider; "" when it is not.
func refused(cfg *rest.Config) string {
	switch u, err := url.Parse(cfg.Host); {
	case err != nil || u.Scheme != "https" || u.Host == "":
		return fmt.Sprintf("server %q: %s", cfg.Host, cluster.RefuseHTTP)
	case cfg.Insecure:
		return cluster.RefuseInsecure
	case cfg.ExecProvider != nil:
		return cluster.RefuseExec
	case cfg.AuthProvider != nil:
		return cluster.RefuseAuthProvider
	}
	return ""
}

// nodeObject is the Node the node registers: tainted so that only pods
// tolerating kube.TaintSandbox come, with the host's CPUs and memory and
// MaxSandboxes pods as its capacity.
func nodeObject(c Config) (*corev1.Node, error) {
	var si unix.Sysinfo_t
	if err := unix.Sysinfo(&si); err != nil {
		return nil, fmt.Errorf("reading the host's memory: %w", err)
	}
	var fs unix.Statfs_t
	if err := unix.Statfs(c.Root, &fs); err != nil {
		return nil, fmt.Errorf("reading the size of %s's file system: %w", c.Root, err)
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewQuantity(int64(runtime.NumCPU()), resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(int64(si.Totalram)*int64(si.Unit), resource.BinarySI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(int64(fs.Blocks)*fs.Bsize, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(int64(c.MaxSandboxes), resource.DecimalSI),
	}
	key, err := receipt.LoadOrCreateKey(filepath.Join(c.Root, "keys"))
	if err != nil {
		return nil, fmt.Errorf("the node's receipt key: %w", err)
	}
	now := metav1.Now()
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        c.Name,
			Annotations: map[string]string{KeyAnnotation: base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey))},
			Labels: map[string]string{
				NodeLabel: "true", "kubernetes.io/hostname": c.Name, "kubernetes.io/os": "linux",
				"kubernetes.io/arch": runtime.GOARCH, "type": "virtual-kubelet",
			},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: kube.TaintSandbox, Value: "true", Effect: corev1.TaintEffectNoSchedule}}},
		Status: corev1.NodeStatus{
			Phase:       corev1.NodeRunning,
			Capacity:    capacity,
			Allocatable: capacity.DeepCopy(),
			Conditions: []corev1.NodeCondition{
				{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "AirlockReady", Message: "airlock node is ready", LastHeartbeatTime: now, LastTransitionTime: now},
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now},
				{Type: corev1.NodeDiskPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now},
				{Type: corev1.NodePIDPressure, Status: corev1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now},
				{Type: corev1.NodeNetworkUnavailable, Status: corev1.ConditionFalse, LastHeartbeatTime: now, LastTransitionTime: now},
			},
			Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: c.Address}, {Type: corev1.NodeHostName, Address: c.Name}},
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem: "linux", Architecture: runtime.GOARCH,
				KubeletVersion: "airlock-" + c.Version, ContainerRuntimeVersion: "airlock://" + c.Version,
			},
		},
	}
	if c.Port != 0 {
		n.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(c.Port)
	}
	if c.MaxSandboxes <= 0 {
		return nil, fmt.Errorf("%w: --max-sandboxes %s: give the most pods this node runs at once", errdefs.ErrInvalidArgument, strconv.Itoa(c.MaxSandboxes))
	}
	return n, nil
}

// kubeletAPI is the node's server for the API server's kubectl logs and
// exec: TLS, and every request authenticated and authorized by the API
// server (TokenReview, SubjectAccessReview on nodes/proxy and its
// subresources), as a kubelet's webhook mode does.
func kubeletAPI(client kubernetes.Interface, c Config, prov *Provider) (*http.Server, error) {
	if c.TLSCert == "" || c.TLSKey == "" || c.ClientCA == "" {
		return nil, fmt.Errorf("%w: --port %d serves kubectl logs and exec over TLS only: give --tls-cert, --tls-key and --client-ca too", errdefs.ErrInvalidArgument, c.Port)
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCert, c.TLSKey)
	if err != nil {
		return nil, fmt.Errorf("%w: --tls-cert/--tls-key: %v", errdefs.ErrInvalidArgument, err)
	}
	caPEM, err := os.ReadFile(c.ClientCA)
	if err != nil {
		return nil, fmt.Errorf("%w: --client-ca: %v", errdefs.ErrInvalidArgument, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%w: --client-ca %s holds no PEM certificate", errdefs.ErrInvalidArgument, c.ClientCA)
	}
	ca, err := dynamiccertificates.NewDynamicCAContentFromFile("client-ca", c.ClientCA)
	if err != nil {
		return nil, fmt.Errorf("%w: --client-ca: %v", errdefs.ErrInvalidArgument, err)
	}
	auth, err := nodeutil.WebhookAuth(client, c.Name, func(wc *nodeutil.WebhookAuthConfig) error {
		wc.AuthnConfig.ClientCertificateCAContentProvider = ca
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrInternal, err)
	}
	h := api.PodHandler(api.PodHandlerConfig{
		RunInContainer:        prov.RunInContainer,
		GetContainerLogs:      prov.GetContainerLogs,
		GetPods:               prov.GetPods,
		GetPodsFromKubernetes: prov.GetPods,
		StreamIdleTimeout:     5 * time.Minute,
		StreamCreationTimeout: 30 * time.Second,
	}, false)
	// As airlock serve's: a connection idle between requests, answered or
	// not (a client with no credentials gets its 401 and may stay), is
	// closed, and a request's headers are bounded. No ReadTimeout: an
	// exec's stream lives as long as the exec.
	return &http.Server{
		Handler:           nodeutil.WithAuth(execIsCreate{auth}, h),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		TLSConfig: &tls.Config{
			MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert},
			ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pool,
		},
	}, nil
}

// execIsCreate authorizes a request that runs something in a pod (exec,
// attach, run, port-forward) as create on nodes/proxy whatever its
// method. The kubelet's mapping takes a WebSocket's GET as get, so a
// client allowed only to read nodes/proxy (monitoring) could run
// commands in every pod of the node.
type execIsCreate struct{ nodeutil.Auth }

func (a execIsCreate) GetRequestAttributes(u user.Info, r *http.Request) authorizer.Attributes {
	attrs := a.Auth.GetRequestAttributes(u, r)
	for _, p := range []string{"/exec", "/attach", "/run", "/portForward", "/portforward"} {
		if r.URL.Path == p || strings.HasPrefix(r.URL.Path, p+"/") {
			return authorizer.AttributesRecord{
				User: attrs.GetUser(), Verb: "create", Namespace: attrs.GetNamespace(),
				APIGroup: attrs.GetAPIGroup(), APIVersion: attrs.GetAPIVersion(), Resource: attrs.GetResource(),
				Subresource: attrs.GetSubresource(), Name: attrs.GetName(), ResourceRequest: attrs.IsResourceRequest(),
				Path: attrs.GetPath(),
			}
		}
	}
	return attrs
}
