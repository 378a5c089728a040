package docker

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlock-sandbox/airlock/isolation"
)

// DefaultRuntime is the name the default root registers its runsc under
// with dockerd; every other root registers one of its own.
var DefaultRuntime = isolation.DockerRuntimes[isolation.GVisor]

// runtimeName is the name dockerd knows mode m's runtime by on this
// engine: the root's own runsc registration for gVisor.
func (e *Engine) runtimeName(m isolation.Mode) (string, bool) {
	rt, ok := isolation.DockerRuntimes[m]
	if ok && m == isolation.GVisor {
		rt = e.gvisor
	}
	return rt, ok
}

// Registered is airlock's runsc as dockerd has it registered.
type Registered struct {
	// Name is the runtime's name; Found is whether dockerd has it.
	Name  string
	Found bool
	// Path and Args are dockerd's entry for it.
	Path string
	Args []string
}

// Registered returns dockerd's entry for this engine's runsc runtime.
func (e *Engine) Registered(ctx context.Context) (Registered, error) {
	r := Registered{Name: e.gvisor}
	info, err := e.cli.Info(ctx)
	if err != nil {
		return r, unavailable(e.cli.DaemonHost(), err)
	}
	rt, ok := info.Runtimes[e.gvisor]
	r.Found, r.Path, r.Args = ok, rt.Path, rt.Args
	return r, nil
}

// privateLogs keeps the directory of the sandbox logs (pattern
// "<dir>/%ID%/") private: runsc creates it world-readable, and the logs
// hold command lines and container ids. Best effort: airlock may not be
// root, and dockerd may be on another host.
func (e *Engine) privateLogs(pattern string) {
	clean := filepath.Clean(pattern)
	if filepath.Base(clean) != "%ID%" || strings.Contains(filepath.Dir(clean), "%") {
		return // not a layout airlock registered
	}
	dir := filepath.Dir(clean)
	err := os.Mkdir(dir, 0o700)
	if os.IsExist(err) {
		var fi os.FileInfo
		if fi, err = os.Lstat(dir); err == nil && fi.IsDir() && fi.Mode().Perm()&0o077 != 0 {
			err = os.Chmod(dir, 0o700)
		}
	}
	if err != nil {
		e.log.Debug("keeping the sandbox logs private", "dir", dir, "err", err)
	}
}
