package runner

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/seccomp"
)

// seccompCacheFile names where a profile that compiled is remembered,
// keyed by all the result depends on: the profile's bytes (nil for the
// embedded default), the mode, libseccomp's version, and this very airlock
// binary (path, inode, size, mtime). Loading and compiling the default
// profile costs about 15 ms; reading the cache well under one. "" when
// there is nothing to key on.
func (r *Runner) seccompCacheFile(raw []byte, mode isolation.Mode) string {
	lib := seccomp.LibVersion()
	exe, err := os.Executable()
	if lib == "" || err != nil {
		return ""
	}
	self := engine.FileKey(exe)
	if self == "" {
		return ""
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00", mode, lib, self)
	h.Write(raw)
	return filepath.Join(r.root, "cache", "seccomp", hex.EncodeToString(h.Sum(nil))+".json")
}

func readCachedProfile(file string) *isolation.SeccompProfile {
	if file == "" {
		return nil
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	var prof isolation.SeccompProfile
	if json.Unmarshal(b, &prof) != nil || len(prof.JSON) == 0 {
		return nil
	}
	// The profile's own hash must still match what is recorded for it.
	if sum := sha256.Sum256(prof.JSON); hex.EncodeToString(sum[:]) != prof.SHA256 {
		return nil
	}
	// Only the hashed JSON is trusted: the spec the runtime gets is derived
	// from it anew (cheap; the compile is what the cache skips), never read.
	spec, err := seccomp.SpecOf(prof.JSON)
	if err != nil {
		return nil
	}
	prof.Spec = spec
	return &prof
}

func writeCachedProfile(file string, prof *isolation.SeccompProfile) {
	if file == "" {
		return
	}
	// The spec is not stored: readCachedProfile derives it from the JSON.
	entry := isolation.SeccompProfile{JSON: prof.JSON, SHA256: prof.SHA256}
	if b, err := json.Marshal(entry); err == nil {
		atomicfile.WriteFile(file, b, 0o600)
	}
	// Each airlock build keys anew; keep the newest few.
	ents, _ := os.ReadDir(filepath.Dir(file))
	if len(ents) <= maxCachedProfiles {
		return
	}
	type aged struct {
		name string
		mod  int64
	}
	var all []aged
	for _, e := range ents {
		if fi, err := e.Info(); err == nil {
			all = append(all, aged{e.Name(), fi.ModTime().UnixNano()})
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].mod < all[j].mod })
	for _, a := range all[:max(0, len(all)-maxCachedProfiles)] {
		os.Remove(filepath.Join(filepath.Dir(file), a.name))
	}
}

const maxCachedProfiles = 16
