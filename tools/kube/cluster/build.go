package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// buildRecipe is hashed into every cache key with the module's go.sum:
// change it when the way the binaries are built changes.
const buildRecipe = "airlock kube build 1: CGO_ENABLED=0 -trimpath"

// Logf reports progress, one line a call.
type Logf func(format string, args ...any)

// Binaries are the built control plane, read from one cache directory per
// module.
type Binaries struct {
	Etcd, APIServer, ControllerManager, Scheduler, AgentSandbox string
	// Kubectl is built from the same release as the API server, within
	// its supported skew; it is a client, not started.
	Kubectl string
	// CRDs and RBAC are agent-sandbox's CRDs and ClusterRoles, copied from
	// its module at build time.
	CRDs, RBAC []string
}

// list is the binaries' paths, one a line.
func (b Binaries) list() string {
	return strings.Join([]string{b.Etcd, b.APIServer, b.ControllerManager, b.Scheduler, b.AgentSandbox}, "\n") + "\n"
}

// Build builds whatever of the control plane is not in the cache yet, from
// the modules under src (this module's directory), and returns it. A module's
// binaries are kept under <root>/kube/bin/<module>-<hash of its go.sum>.
func Build(ctx context.Context, src string, l Layout, goBin string, logf Logf) (Binaries, error) {
	var b Binaries
	if err := os.MkdirAll(l.Bin(), 0o700); err != nil {
		return b, fmt.Errorf("creating %s: %w", l.Bin(), err)
	}
	k8s, err := buildModule(ctx, src, l, goBin, logf, "kubernetes", func(ctx context.Context, dir, out string) error {
		version, err := moduleVersion(ctx, goBin, dir, "k8s.io/kubernetes")
		if err != nil {
			return err
		}
		major, minor, ok := majorMinor(version)
		if !ok {
			return fmt.Errorf("k8s.io/kubernetes version %q is not vMAJOR.MINOR.PATCH", version)
		}
		const v = "k8s.io/component-base/version."
		ldflags := fmt.Sprintf("-X %sgitVersion=%s -X %sgitMajor=%s -X %sgitMinor=%s -X %sgitTreeState=clean",
			v, version, v, major, v, minor, v)
		for _, c := range []struct{ name, about string }{
			{"kube-apiserver", "about 10 minutes cold"},
			{"kube-controller-manager", "about 4 minutes cold"},
			{"kube-scheduler", "under a minute cold"},
			{"kubectl", "under a minute after the apiserver"},
		} {
			if err := goBuild(ctx, goBin, dir, logf, c.name+" "+version+" ("+c.about+")", filepath.Join(out, c.name),
				ldflags, "k8s.io/kubernetes/cmd/"+c.name, l); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return b, err
	}
	etcd, err := buildModule(ctx, filepath.Join(src, "etcd"), l, goBin, logf, "etcd", func(ctx context.Context, dir, out string) error {
		version, err := moduleVersion(ctx, goBin, dir, "go.etcd.io/etcd/server/v3")
		if err != nil {
			return err
		}
		return goBuild(ctx, goBin, dir, logf, "etcd "+version+" (about a minute cold)", filepath.Join(out, "etcd"),
			"", "go.etcd.io/etcd/server/v3", l)
	})
	if err != nil {
		return b, err
	}
	as, err := buildModule(ctx, filepath.Join(src, "agent-sandbox"), l, goBin, logf, "agent-sandbox", func(ctx context.Context, dir, out string) error {
		const mod = "sigs.k8s.io/agent-sandbox"
		version, err := moduleVersion(ctx, goBin, dir, mod)
		if err != nil {
			return err
		}
		if err := goBuild(ctx, goBin, dir, logf, "agent-sandbox-controller "+version+" (about 3 minutes cold)",
			filepath.Join(out, "agent-sandbox-controller"), "", mod+"/cmd/agent-sandbox-controller", l); err != nil {
			return err
		}
		modDir, err := moduleDir(ctx, goBin, dir, mod)
		if err != nil {
			return err
		}
		crds, err := filepath.Glob(filepath.Join(modDir, "k8s", "crds", "*.yaml"))
		if err != nil || len(crds) == 0 {
			return fmt.Errorf("finding the CRDs in %s: none under k8s/crds", modDir)
		}
		rbac := []string{
			filepath.Join(modDir, "k8s", "rbac.generated.yaml"),
			filepath.Join(modDir, "k8s", "extensions-rbac.generated.yaml"),
		}
		if err := copyFiles(filepath.Join(out, "crds"), crds); err != nil {
			return err
		}
		return copyFiles(filepath.Join(out, "rbac"), rbac)
	})
	if err != nil {
		return b, err
	}
	b = Binaries{
		Etcd:              filepath.Join(etcd, "etcd"),
		APIServer:         filepath.Join(k8s, "kube-apiserver"),
		ControllerManager: filepath.Join(k8s, "kube-controller-manager"),
		Scheduler:         filepath.Join(k8s, "kube-scheduler"),
		Kubectl:           filepath.Join(k8s, "kubectl"),
		AgentSandbox:      filepath.Join(as, "agent-sandbox-controller"),
	}
	if b.CRDs, err = filepath.Glob(filepath.Join(as, "crds", "*.yaml")); err != nil {
		return b, err
	}
	if b.RBAC, err = filepath.Glob(filepath.Join(as, "rbac", "*.yaml")); err != nil {
		return b, err
	}
	return b, nil
}

// buildModule returns the cache directory of the module in dir, running
// build into a fresh one first if it is not complete. Other cache
// directories of the same module (older go.sum hashes) are removed.
func buildModule(ctx context.Context, dir string, l Layout, goBin string, logf Logf, name string,
	build func(ctx context.Context, dir, out string) error) (string, error) {
	key, err := cacheKey(dir)
	if err != nil {
		return "", err
	}
	out := filepath.Join(l.Bin(), name+"-"+key)
	if _, err := os.Stat(filepath.Join(out, ".complete")); err == nil {
		logf("%s binaries cached (%s)", name, out)
		return out, nil
	}
	tmp := out + ".partial"
	if err := os.RemoveAll(tmp); err != nil {
		return "", err
	}
	if err := os.MkdirAll(tmp, 0o700); err != nil {
		return "", err
	}
	if err := build(ctx, dir, tmp); err != nil {
		return "", fmt.Errorf("building %s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(tmp, ".complete"), []byte(buildRecipe+"\n"), 0o600); err != nil {
		return "", err
	}
	if err := os.RemoveAll(out); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, out); err != nil {
		return "", err
	}
	stale, _ := filepath.Glob(filepath.Join(l.Bin(), name+"-*"))
	for _, s := range stale {
		if s != out {
			logf("removing the stale %s", s)
			_ = os.RemoveAll(s)
		}
	}
	return out, nil
}

// cacheKey hashes the module's go.sum with the build recipe.
func cacheKey(dir string) (string, error) {
	sum, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	if err != nil {
		return "", fmt.Errorf("reading the go.sum that keys the build cache: %w", err)
	}
	h := sha256.New()
	io.WriteString(h, buildRecipe+"\n")
	h.Write(sum)
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// goBuild builds pkg to out, printing a line every 15 seconds; its output
// goes to <root>/kube/bin/build.log.
func goBuild(ctx context.Context, goBin, dir string, logf Logf, what, out, ldflags, pkg string, l Layout) error {
	logPath := filepath.Join(l.Bin(), "build.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logFile.Close()
	args := []string{"build", "-trimpath", "-o", out}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	args = append(args, pkg)
	fmt.Fprintf(logFile, "== %s: (cd %s && %s %s)\n", time.Now().UTC().Format(time.RFC3339), dir, goBin, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, goBin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=-mod=readonly")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	logf("building %s", what)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting go build: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("go build %s: %w (log: %s)", pkg, err, logPath)
			}
			logf("built %s in %s", filepath.Base(out), time.Since(start).Round(time.Second))
			return nil
		case <-tick.C:
			logf("  … building %s, %s so far", filepath.Base(out), time.Since(start).Round(time.Second))
		}
	}
}

func moduleVersion(ctx context.Context, goBin, dir, mod string) (string, error) {
	return goList(ctx, goBin, dir, "{{.Version}}", mod)
}

func moduleDir(ctx context.Context, goBin, dir, mod string) (string, error) {
	// The module is downloaded by the build; -json makes sure of it.
	cmd := exec.CommandContext(ctx, goBin, "mod", "download", "-json", mod)
	cmd.Dir = dir
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go mod download %s: %w: %s", mod, err, strings.TrimSpace(stderr.String()))
	}
	var m struct{ Dir, Error string }
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		return "", fmt.Errorf("reading go mod download's answer for %s: %w", mod, err)
	}
	if m.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", mod, m.Error)
	}
	return m.Dir, nil
}

func goList(ctx context.Context, goBin, dir, format, mod string) (string, error) {
	cmd := exec.CommandContext(ctx, goBin, "list", "-m", "-f", format, mod)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m %s: %w: %s", mod, err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// majorMinor splits v1.37.2 into "1" and "37".
func majorMinor(version string) (major, minor string, ok bool) {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if !strings.HasPrefix(version, "v") || len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return "", "", false
	}
	return parts[0], parts[1], true
}

func copyFiles(dir string, files []string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("copying %s: %w", f, err)
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}
