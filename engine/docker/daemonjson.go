package docker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
)

// DaemonJSON is dockerd's default configuration file.
const DaemonJSON = "/etc/docker/daemon.json"

// Runtime is one entry of daemon.json's "runtimes" object.
type Runtime struct {
	Path        string   `json:"path"`
	RuntimeArgs []string `json:"runtimeArgs,omitempty"`
}

// RegisterRuntime adds or updates runtimes[name] in the daemon.json at path,
// keeping every other key exactly as it was. A file that is not valid JSON
// is left alone and reported. An entry that runs another binary than
// rt.Path is refused (errdefs already exists) unless replace is set: it is
// another installation's, and re-pointing it would move that
// installation's runs onto this runsc. Before changing an existing file it
// copies it to a timestamped backup beside it. It returns whether the file
// changed and the backup's path, if one was made.
func RegisterRuntime(path, name string, rt Runtime, replace bool) (changed bool, backup string, err error) {
	p, err := planRuntime(path, name, rt, replace)
	if err != nil || !p.changed {
		return false, "", err
	}
	out, err := json.MarshalIndent(p.top, "", "  ")
	if err != nil {
		return false, "", err
	}
	orig, exists := p.orig, p.exists
	mode := fs.FileMode(0o644)
	if exists {
		if fi, err := os.Stat(path); err == nil {
			mode = fi.Mode().Perm()
		}
		backup = fmt.Sprintf("%s.airlock-backup-%s", path, time.Now().UTC().Format("20060102T150405.000000000Z"))
		if err := os.WriteFile(backup, orig, mode); err != nil {
			return false, "", fmt.Errorf("backing up %s: %w", path, err)
		}
	} else if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return false, "", err
	}
	if err := atomicfile.WriteFile(path, append(out, '\n'), mode); err != nil {
		return false, backup, err
	}
	return true, backup, nil
}

// CheckRuntime says whether RegisterRuntime would change the daemon.json
// at path, or refuses as it would, and changes nothing.
func CheckRuntime(path, name string, rt Runtime, replace bool) (changed bool, err error) {
	p, err := planRuntime(path, name, rt, replace)
	return p.changed, err
}

// runtimePlan is daemon.json as RegisterRuntime would write it.
type runtimePlan struct {
	orig    []byte
	exists  bool
	top     map[string]json.RawMessage
	changed bool
}

// planRuntime reads the daemon.json at path and sets runtimes[name] to rt
// in its parsed keys, refusing what RegisterRuntime refuses.
func planRuntime(path, name string, rt Runtime, replace bool) (runtimePlan, error) {
	var p runtimePlan
	orig, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return p, fmt.Errorf("reading %s: %w", path, err)
	}
	p.orig, p.exists = orig, err == nil
	p.top = map[string]json.RawMessage{}
	if p.exists && len(bytes.TrimSpace(orig)) > 0 {
		if err := json.Unmarshal(orig, &p.top); err != nil {
			return p, fmt.Errorf("%w: %s is not a JSON object (%v); fix it by hand, airlock will not overwrite it", errdefs.ErrInvalidArgument, path, err)
		}
	}
	runtimes := map[string]json.RawMessage{}
	if raw, ok := p.top["runtimes"]; ok {
		if err := json.Unmarshal(raw, &runtimes); err != nil {
			return p, fmt.Errorf("%w: %s: \"runtimes\" is not an object (%v); fix it by hand", errdefs.ErrInvalidArgument, path, err)
		}
	}
	if raw, ok := runtimes[name]; ok {
		var cur Runtime
		if json.Unmarshal(raw, &cur) == nil && reflect.DeepEqual(normal(cur), normal(rt)) {
			return p, nil
		}
		if cur.Path != rt.Path && !replace {
			return p, fmt.Errorf("%w: %s: runtime %q already runs %q, not %q: it belongs to another airlock root (or another runsc), whose docker runs would move onto this one; register this root under a name of its own with --name NAME (install.sh: --runtime NAME), or, if nothing uses %q any more, pass --replace",
				errdefs.ErrAlreadyExists, path, name, cur.Path, rt.Path, cur.Path)
		}
	}
	entry, err := json.Marshal(rt)
	if err != nil {
		return p, err
	}
	runtimes[name] = entry
	if p.top["runtimes"], err = json.Marshal(runtimes); err != nil {
		return p, err
	}
	p.changed = true
	return p, nil
}

func normal(r Runtime) Runtime {
	if len(r.RuntimeArgs) == 0 {
		r.RuntimeArgs = nil
	}
	return r
}
