package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestFacesReachNoEngine holds the layering: the faces reach sandboxes
// only through the service, and only package engines builds concrete
// engines. server, mcpserver, service, wire and kube/node depend on no
// concrete engine at all; the CLI and airlock-node, which hand the
// service its engines, import none themselves. The Kubernetes client
// stays out of the airlock binary.
func TestFacesReachNoEngine(t *testing.T) {
	const mod = "github.com/airlock-sandbox/airlock/"
	concrete := []string{mod + "engine/oci", mod + "engine/docker", mod + "engines"}
	for _, pkg := range []string{"server", "mcpserver", "service", "wire", "kube/node"} {
		for _, dep := range goList(t, "-deps", mod+pkg) {
			if slices.Contains(concrete, dep) {
				t.Errorf("%s depends on %s: a face or the service must not know a concrete engine", pkg, dep)
			}
		}
	}
	for _, cmd := range []string{"cmd/airlock", "cmd/airlock-node"} {
		for _, imp := range goList(t, "-f", `{{join .Imports "\n"}}`, mod+cmd) {
			if imp == mod+"engine" || strings.HasPrefix(imp, mod+"engine/") {
				t.Errorf("%s imports %s: build engines through package engines", cmd, imp)
			}
		}
	}
	for _, dep := range goList(t, "-deps", mod+"cmd/airlock") {
		if strings.HasPrefix(dep, "k8s.io/client-go/") || strings.HasPrefix(dep, "github.com/virtual-kubelet/") {
			t.Errorf("cmd/airlock depends on %s: the Kubernetes node and its client belong to cmd/airlock-node", dep)
		}
	}
}

func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).Output()
	if err != nil {
		t.Fatalf("go list %v: %v", args, err)
	}
	return strings.Fields(string(out))
}
