package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
)

var versions sync.Map // binary identity → first line of `path --version`

// BinaryVersion returns the first line a runtime binary prints for
// --version. Asking costs an exec of a large binary (about 20 ms for
// runsc), so answers are remembered for the life of the process and, when
// cacheDir is not empty, in <cacheDir>/versions.json, keyed by the binary's
// path, inode, size and modification time: a replaced binary is asked
// again. A binary that cannot say is an error; its answer is never
// guessed.
func BinaryVersion(ctx context.Context, path, cacheDir string) (string, error) {
	key := binaryKey(path)
	if v, ok := versions.Load(key); ok {
		return v.(string), nil
	}
	cacheFile := ""
	if cacheDir != "" && key != path {
		cacheFile = filepath.Join(cacheDir, "versions.json")
		if v, ok := readVersions(cacheFile)[key]; ok {
			versions.Store(key, v)
			return v, nil
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("running %s --version: %w", path, err)
	}
	v, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	if v == "" {
		return "", fmt.Errorf("%s --version printed nothing", path)
	}
	versions.Store(key, v)
	if cacheFile != "" {
		m := readVersions(cacheFile)
		abs, _, _ := strings.Cut(key, ":")
		for k := range m {
			if strings.HasPrefix(k, abs+":") {
				delete(m, k) // an older build at the same path
			}
		}
		m[key] = v
		if b, err := json.Marshal(m); err == nil && os.MkdirAll(cacheDir, 0o700) == nil {
			atomicfile.WriteFile(cacheFile, b, 0o600)
		}
	}
	return v, nil
}

// binaryKey names the binary at path (looked up in PATH) as it is now;
// path alone when it cannot be read.
func binaryKey(path string) string {
	abs, err := exec.LookPath(path)
	if err != nil {
		return path
	}
	if k := FileKey(abs); k != "" {
		return k
	}
	return path
}

// FileKey names the file at path as it is now (path, inode, size and
// modification time), for caches that must miss once the file is replaced;
// "" when it cannot be read.
func FileKey(path string) string {
	var st syscall.Stat_t
	if syscall.Stat(path, &st) != nil {
		return ""
	}
	return fmt.Sprintf("%s:%d:%d:%d.%09d", path, st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec)
}

func readVersions(file string) map[string]string {
	m := map[string]string{}
	if b, err := os.ReadFile(file); err == nil {
		json.Unmarshal(b, &m)
	}
	return m
}
