package engine

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"time"
)

var versions sync.Map // binary path → first line of `path --version`

// BinaryVersion returns the first line a runtime binary prints for
// --version, remembered per path for the life of the process.
func BinaryVersion(ctx context.Context, path string) string {
	if v, ok := versions.Load(path); ok {
		return v.(string)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return "unknown"
	}
	v, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	versions.Store(path, v)
	return v
}
