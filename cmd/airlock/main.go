// Command airlock runs untrusted code in a locked-down sandbox: a
// digest-pinned image under gVisor, with no network, no capabilities, a
// read-only root, hard limits, and a precise account of how the run ended.
package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := newRootCmd().ExecuteContext(ctx)
	code := exitCode(err)
	var ec *exitErr
	if err != nil && !errors.As(err, &ec) {
		sayf(os.Stderr, "%v", err)
	}
	stop()
	os.Exit(code)
}
