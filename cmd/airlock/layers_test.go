package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestFacesReachNoEngine holds the layering: the faces reach sandboxes
// only through the service, and only package engines builds concrete
// engines. server, mcpserver, service and wire depend on no concrete
// engine at all; the CLI, which hands the service its engines, imports
// none itself.
func TestFacesReachNoEngine(t *testing.T) {
	const mod = "github.com/airlock-sandbox/airlock/"
	concrete := []string{mod + "engine/oci", mod + "engine/docker", mod + "engines"}
	for _, pkg := range []string{"server", "mcpserver", "service", "wire"} {
		for _, dep := range goList(t, "-deps", mod+pkg) {
			if slices.Contains(concrete, dep) {
				t.Errorf("%s depends on %s: a face or the service must not know a concrete engine", pkg, dep)
			}
		}
	}
	for _, imp := range goList(t, "-f", `{{join .Imports "\n"}}`, mod+"cmd/airlock") {
		if imp == mod+"engine" || strings.HasPrefix(imp, mod+"engine/") {
			t.Errorf("cmd/airlock imports %s: build engines through package engines", imp)
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
