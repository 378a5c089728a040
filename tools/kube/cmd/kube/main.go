// Command kube builds, starts and stops airlock's Kubernetes control plane
// for tests (package cluster). `make kube-up`, `make kube-down` and
// `make kube-clean` run it from tools/kube.
//
//	kube build   build what is not cached (make test runs it beside setup)
//	kube up      build what is not cached, start, wait until ready, and
//	             print, as the last line, `export KUBECONFIG=... PATH=...`
//	             (the admin kubeconfig, and kubectl of the same release first)
//	kube down    stop exactly the recorded processes and remove the runtime state
//	kube clean   down, then remove the cached binaries too
//	kube node NAME
//	             issue node NAME's credentials (system:node:NAME) and print
//	             the path of its 0600 kubeconfig, for airlock node
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/tools/kube/cluster"
)

func main() {
	root := flag.String("root", "", "airlock's root (default $AIRLOCK_ROOT, else "+cluster.DefaultRoot+")")
	src := flag.String("src", ".", "the tools/kube module directory, which pins the versions")
	timeout := flag.Duration("timeout", 3*time.Minute, "how long up waits for readiness once built")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: kube [flags] build|up|down|clean|node NAME|user NAME\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 2 && (flag.Arg(0) == "node" || flag.Arg(0) == "user") {
		issue := cluster.NodeKubeconfig
		if flag.Arg(0) == "user" {
			issue = cluster.UserKubeconfig
		}
		path, err := issue(cluster.NewLayout(*root), flag.Arg(1))
		if err != nil {
			fmt.Fprintf(os.Stderr, "kube %s: %v\n", flag.Arg(0), err)
			os.Exit(1)
		}
		fmt.Println(path)
		return
	}
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	dir, err := filepath.Abs(*src)
	if err != nil {
		fmt.Fprintf(os.Stderr, "kube: %v\n", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, flag.Arg(0), cluster.NewLayout(*root), dir, *timeout); err != nil {
		fmt.Fprintf(os.Stderr, "kube %s: %v\n", flag.Arg(0), err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cmd string, l cluster.Layout, src string, timeout time.Duration) error {
	begin := time.Now()
	logf := func(format string, args ...any) {
		fmt.Printf("[kube %4ds] %s\n", int(time.Since(begin).Seconds()), fmt.Sprintf(format, args...))
	}
	if cmd != "build" && cmd != "up" && cmd != "down" && cmd != "clean" {
		return fmt.Errorf("unknown command %q (build, up, down or clean)", cmd)
	}
	unlock, err := cluster.Lock(l)
	if err != nil {
		return err
	}
	defer unlock()
	goBin := os.Getenv("GO")
	if goBin == "" {
		goBin = "go"
	}
	switch cmd {
	case "build":
		if _, err := cluster.Build(ctx, src, l, goBin, logf); err != nil {
			return err
		}
		logf("built in %s; cached in %s", time.Since(begin).Round(time.Second), l.Bin())
	case "up":
		b, err := cluster.Build(ctx, src, l, goBin, logf)
		if err != nil {
			return err
		}
		already, err := cluster.Up(ctx, l, b, cluster.Options{Timeout: timeout}, logf)
		if err != nil {
			return err
		}
		if already {
			logf("already up")
		} else {
			logf("up in %s", time.Since(begin).Round(100*time.Millisecond))
		}
		fmt.Println(l.ExportLine())
		return nil
	case "down":
		if err := cluster.Down(ctx, l, logf); err != nil {
			return err
		}
		logf("down; the built binaries stay in %s", l.Bin())
		return nil
	default: // clean
		if err := cluster.Clean(ctx, l, logf); err != nil {
			return err
		}
		logf("removed %s", l.Dir)
	}
	return nil
}
