//go:build e2e

package kube_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/airlock-sandbox/airlock/internal/timing"
)

var (
	rounds  = flag.Int("kube.rounds", 10, "claims, and local creates, measured")
	podJobs = flag.Int("kube.pods", 24, "one-shot pods in each throughput scenario")
)

// BenchmarkKube is `make bench-kube` (run it with -benchtime=1x): claim to
// first exec through the cluster (a SandboxClaim on a warm pool of 2 on
// airlock nodes, then kubectl exec) beside the same through a local warm
// pool (airlock serve --pool-sandboxes, POST /v1/sandboxes, then an exec),
// a cold local create and an exec in a live sandbox both ways; then one-shot
// pods per second on one airlock node and on two.
func BenchmarkKube(b *testing.B) {
	nodes := map[string]*node{"airlock-a": startNode(b, "airlock-a"), "airlock-b": startNode(b, "airlock-b")}
	cs := client(b)
	a := nodes["airlock-a"]
	airlock(b, a.root, "template", "create", "kb", "--memory", "256MiB", "--cpus", "0.5")
	yaml := airlock(b, a.root, "kube", "render", "--template", "kb", "--warm", "2", "--ttl", "30m")
	kubectl(b, yaml, "apply", "-f", "-")
	b.Cleanup(func() {
		kubectl(b, yaml, "delete", "-f", "-", "--wait=true")
		waitFor(b, 2*time.Minute, "the warm pool's sandboxes gone", func() (bool, string) {
			n := len(nodes["airlock-a"].sandboxes(b)) + len(nodes["airlock-b"].sandboxes(b))
			return n == 0, fmt.Sprint(n, " left")
		})
	})
	warm := func() {
		waitFor(b, 3*time.Minute, "the warm pool's 2 pods Running", func() (bool, string) {
			out := kubectlOut(b, "get", "sandboxwarmpool", "kb", "-o", "jsonpath={.status.readyReplicas}")
			return strings.TrimSpace(out) == "2", out
		})
	}

	var claim, kubeExec []time.Duration
	for i := range *rounds {
		warm()
		name := fmt.Sprintf("kb-claim-%d", i)
		start := time.Now()
		kubectl(b, []byte(`{"apiVersion": "extensions.agents.x-k8s.io/v1beta1", "kind": "SandboxClaim",
 "metadata": {"name": "`+name+`", "namespace": "default"}, "spec": {"warmPoolRef": {"name": "kb"}}}`), "create", "-f", "-")
		var pod string
		waitFor(b, time.Minute, "claim "+name+" ready", func() (bool, string) {
			f := strings.Fields(kubectlOut(b, "get", "sandboxclaim", name, "-o", `jsonpath={.status.sandbox.name} {.status.conditions[?(@.type=="Ready")].status}`))
			if len(f) == 2 && f[1] == "True" {
				pod = f[0]
				return true, ""
			}
			return false, strings.Join(f, " ")
		})
		kubectl(b, nil, "exec", pod, "--", "true")
		claim = append(claim, time.Since(start))
		start = time.Now()
		kubectl(b, nil, "exec", pod, "--", "true")
		kubeExec = append(kubeExec, time.Since(start))
		kubectl(b, nil, "delete", "sandboxclaim", name, "--wait=false")
	}

	// The same through a local warm pool of airlock serve, on node a's root.
	sock := filepath.Join(b.TempDir(), "airlock.sock")
	srv := exec.Command(airlockBin, "--root", a.root, "serve", "--socket", sock, "--pool-sandboxes", "kb=2")
	srv.Stderr = os.Stderr
	if err := srv.Start(); err != nil {
		b.Fatal(err)
	}
	stopSrv := func() {
		if srv.ProcessState == nil {
			srv.Process.Signal(os.Interrupt)
			srv.Wait()
		}
	}
	b.Cleanup(stopSrv)
	hc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	post := func(path string, body any) map[string]any {
		bb, _ := json.Marshal(body)
		resp, err := hc.Post("http://airlock"+path, "application/json", bytes.NewReader(bb))
		if err != nil {
			b.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		if resp.StatusCode >= 300 {
			b.Fatalf("POST %s: %d %v", path, resp.StatusCode, m)
		}
		return m
	}
	localWarm := func() {
		waitFor(b, time.Minute, "airlock serve's pool of 2", func() (bool, string) {
			resp, err := hc.Get("http://airlock/metrics")
			if err != nil {
				return false, err.Error()
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return strings.Contains(string(body), `airlock_pool_ready{template="sandboxes/kb"} 2`), "not yet"
		})
	}
	var pooled, cold, localExec []time.Duration
	for range *rounds {
		localWarm()
		start := time.Now()
		id := post("/v1/sandboxes", map[string]any{"template": "kb"})["id"].(string)
		post("/v1/sandboxes/"+id+"/exec", map[string]any{"argv": []string{"true"}})
		pooled = append(pooled, time.Since(start))
		start = time.Now()
		post("/v1/sandboxes/"+id+"/exec", map[string]any{"argv": []string{"true"}})
		localExec = append(localExec, time.Since(start))
		req, _ := http.NewRequest("DELETE", "http://airlock/v1/sandboxes/"+id, nil)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
		}
		start = time.Now()
		id = strings.TrimSpace(string(airlock(b, a.root, "sandbox", "create", "--template", "kb")))
		airlock(b, a.root, "exec", id, "--", "true")
		cold = append(cold, time.Since(start))
		airlock(b, a.root, "sandbox", "rm", id)
	}

	// The server's pool lives on node a's root and counts against its
	// --max-sandboxes, which the scheduler cannot see.
	stopSrv()
	one := podRate(b, cs, "one", map[string]string{"kubernetes.io/hostname": "airlock-a"})
	two := podRate(b, cs, "two", nil)

	row := func(name string, d []time.Duration) {
		fmt.Printf("%-52s %8.1f %8.1f %8.1f\n", name, timing.MS(timing.Percentile(d, 50)), timing.MS(timing.Percentile(d, 90)), timing.MS(timing.Mean(d)))
	}
	fmt.Printf("\n%-52s %8s %8s %8s   (ms, %d rounds)\n", "scenario", "p50", "p90", "mean", *rounds)
	row("claim to first exec, cluster (SandboxClaim, kubectl)", claim)
	row("claim to first exec, local pool (POST, exec)", pooled)
	row("create to first exec, local cold (CLI)", cold)
	row("exec in a live sandbox, kubectl exec", kubeExec)
	row("exec in a live sandbox, airlock serve", localExec)
	fmt.Printf("claim, cluster / local pool: %.2f×; kubectl exec / API exec: %.2f×\n",
		float64(timing.Percentile(claim, 50))/float64(timing.Percentile(pooled, 50)),
		float64(timing.Percentile(kubeExec, 50))/float64(timing.Percentile(localExec, 50)))
	fmt.Printf("one-shot pods (sh -c true), %d each: one node %.2f/s, two nodes %.2f/s (%.2f×)\n", *podJobs, one, two, two/one)
	b.ReportMetric(timing.MS(timing.Percentile(claim, 50)), "claim-ms")
	b.ReportMetric(two/one, "two-node-speedup")
}

// podRate creates podJobs one-shot pods at once, on the nodes selector
// picks (nil: either), and returns pods per second from the first create
// to the last Succeeded; it deletes them after.
func podRate(b *testing.B, cs *kubernetes.Clientset, tag string, selector map[string]string) float64 {
	ctx := context.Background()
	image := kubectlOut(b, "get", "sandboxtemplate", "kb", "-o", "jsonpath={.spec.podTemplate.spec.containers[0].image}")
	start := time.Now()
	for i := range *podJobs {
		p := pod(fmt.Sprintf("job-%s-%d", tag, i), "", image, func(p *corev1.Pod) {
			p.Labels = map[string]string{"bench": tag}
			p.Spec.NodeSelector = selector
			p.Spec.Containers[0].Command = []string{"sh", "-c", "true"}
		})
		if _, err := cs.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	waitFor(b, 10*time.Minute, tag+": every pod Succeeded", func() (bool, string) {
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "bench=" + tag})
		if err != nil {
			return false, err.Error()
		}
		done := 0
		for _, p := range list.Items {
			if p.Status.Phase == corev1.PodFailed {
				b.Fatalf("pod %s failed: %s %s", p.Name, p.Status.Reason, p.Status.Message)
			}
			if p.Status.Phase == corev1.PodSucceeded {
				done++
			}
		}
		return done == *podJobs, fmt.Sprintf("%d of %d", done, *podJobs)
	})
	rate := float64(*podJobs) / time.Since(start).Seconds()
	cs.CoreV1().Pods("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "bench=" + tag})
	waitFor(b, 2*time.Minute, tag+": pods gone", func() (bool, string) {
		list, err := cs.CoreV1().Pods("default").List(ctx, metav1.ListOptions{LabelSelector: "bench=" + tag})
		return err == nil && len(list.Items) == 0, fmt.Sprint(err)
	})
	return rate
}
