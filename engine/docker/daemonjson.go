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
	"syscall"
	"time"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"
)

// DaemonJSON is dockerd's default configuration file.
const DaemonJSON = "/etc/docker/daemon.json"

// Runtime is one entry of daemon.json's "runtimes" object.
type Runtime struct {
	Path        string   `json:"path"`
	RuntimeArgs []string `json:"runtimeArgs,omitempty"`
}

// RegisterRuntime adds or updates runtimes[name] in the daemon.json at path,
// keeping every other key exactly as it was. A file that is not a JSON
// object, holds a key twice, or is a symlink is left alone and reported.
// An entry that runs another binary than rt.Path, or logs its sandboxes
// elsewhere (another root's --debug-log), is refused (errdefs already
// exists) unless replace is set: it is another installation's, and
// re-pointing it would move that installation's runs onto this runsc.
// Before changing an existing file it copies it to a timestamped backup
// beside it; the new file keeps the old one's mode and owner. Concurrent
// registrations are serialised by a flock on path's directory. It returns
// whether the file changed and the backup's path, if one was made.
func RegisterRuntime(path, name string, rt Runtime, replace bool) (changed bool, backup string, err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return false, "", err
	}
	unlock, err := lockDir(dir)
	if err != nil {
		return false, "", err
	}
	defer unlock()
	p, err := planRuntime(path, name, rt, replace)
	if err != nil || !p.changed {
		return false, "", err
	}
	out, err := json.MarshalIndent(p.top, "", "  ")
	if err != nil {
		return false, "", err
	}
	mode, uid, gid := fs.FileMode(0o644), -1, -1
	if p.exists {
		mode = p.info.Mode().Perm()
		if st, ok := p.info.Sys().(*syscall.Stat_t); ok {
			uid, gid = int(st.Uid), int(st.Gid)
		}
		backup = fmt.Sprintf("%s.airlock-backup-%s", path, time.Now().UTC().Format("20060102T150405.000000000Z"))
		if err := os.WriteFile(backup, p.orig, mode); err != nil {
			return false, "", fmt.Errorf("backing up %s: %w", path, err)
		}
	}
	if err := replaceFile(path, append(out, '\n'), mode, uid, gid); err != nil {
		return false, backup, err
	}
	return true, backup, nil
}

// lockDir holds an exclusive flock on dir until the returned function is
// called: on the directory itself, so that no lock file is left in
// dockerd's configuration directory.
func lockDir(dir string) (func(), error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	if err := unix.Flock(int(d.Fd()), unix.LOCK_EX); err != nil {
		d.Close()
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	return func() { d.Close() }, nil // closing lets go of the flock
}

// replaceFile writes data to a temporary file beside path, gives it mode
// and, unless uid is -1, that owner and group, and renames it over path.
func replaceFile(path string, data []byte, mode fs.FileMode, uid, gid int) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	defer os.Remove(f.Name()) // a no-op once renamed
	_, err = f.Write(data)
	if err == nil && uid >= 0 {
		err = f.Chown(uid, gid)
	}
	if err == nil {
		err = f.Chmod(mode) // after the chown, which clears set-id bits
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
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
	info    fs.FileInfo
	exists  bool
	top     map[string]json.RawMessage
	changed bool
}

// planRuntime reads the daemon.json at path and sets runtimes[name] to rt
// in its parsed keys, refusing what RegisterRuntime refuses.
func planRuntime(path, name string, rt Runtime, replace bool) (runtimePlan, error) {
	var p runtimePlan
	fixIt := "fix it by hand, airlock will not overwrite it"
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return p, fmt.Errorf("reading %s: %w", path, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := filepath.EvalSymlinks(path)
		if err != nil {
			target, _ = os.Readlink(path) // a dangling link
		}
		return p, fmt.Errorf("%w: %s is a symlink (to %q), which writing would replace with a file; register the runtime in the file it names with --daemon-json %s (install.sh takes the same flag)",
			errdefs.ErrInvalidArgument, path, target, target)
	case !fi.Mode().IsRegular():
		return p, fmt.Errorf("%w: %s is not a regular file (mode %v); %s", errdefs.ErrInvalidArgument, path, fi.Mode(), fixIt)
	default:
		if p.orig, err = os.ReadFile(path); err != nil {
			return p, fmt.Errorf("reading %s: %w", path, err)
		}
		p.info, p.exists = fi, true
	}
	p.top = map[string]json.RawMessage{}
	if p.exists && len(bytes.TrimSpace(p.orig)) > 0 {
		if err := json.Unmarshal(p.orig, &p.top); err != nil || p.top == nil {
			if err == nil {
				err = errors.New("it is null")
			}
			return p, fmt.Errorf("%w: %s is not a JSON object (%v); %s", errdefs.ErrInvalidArgument, path, err, fixIt)
		}
		// Rewritten from a map, a key given twice would keep only its
		// last value, where dockerd merges two "runtimes" objects.
		if k, ok := duplicateKey(p.orig); ok {
			return p, fmt.Errorf("%w: %s holds the key %q twice; merge the two by hand, then try again", errdefs.ErrInvalidArgument, path, k)
		}
	}
	runtimes := map[string]json.RawMessage{}
	if raw, ok := p.top["runtimes"]; ok {
		// null is no runtimes, as dockerd reads it.
		if err := json.Unmarshal(raw, &runtimes); err != nil {
			return p, fmt.Errorf("%w: %s: \"runtimes\" is not an object (%v); fix it by hand", errdefs.ErrInvalidArgument, path, err)
		}
		if k, ok := duplicateKey(raw); ok {
			return p, fmt.Errorf("%w: %s: \"runtimes\" holds %q twice; merge the two by hand, then try again", errdefs.ErrInvalidArgument, path, k)
		}
		if runtimes == nil {
			runtimes = map[string]json.RawMessage{}
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
		// The same runsc, but its sandboxes' logs go to another root's
		// directory: that root's entry, which would break its docker runs.
		if theirs, ours := logPattern(cur.RuntimeArgs), logPattern(rt.RuntimeArgs); theirs != "" && theirs != ours && !replace {
			return p, fmt.Errorf("%w: %s: runtime %q logs its sandboxes to %q, not %q: it belongs to another airlock root using the same runsc, whose docker runs would lose their logs; register this root under a name of its own with --name NAME (install.sh: --runtime NAME), or, if nothing uses that root any more, pass --replace",
				errdefs.ErrAlreadyExists, path, name, theirs, ours)
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

// duplicateKey returns a key the JSON object raw holds twice, at its top
// level, if any.
func duplicateKey(raw []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", false
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return "", false
		}
		k, _ := t.(string)
		if seen[k] {
			return k, true
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", false
		}
	}
	return "", false
}

func normal(r Runtime) Runtime {
	if len(r.RuntimeArgs) == 0 {
		r.RuntimeArgs = nil
	}
	return r
}
