package runner

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"testing"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/seccomp"
)

func TestSeccompCache(t *testing.T) {
	r := &Runner{root: t.TempDir()}
	if seccomp.LibVersion() == "" {
		// Built without libseccomp: the profile is refused (fail closed),
		// and there is nothing to key a cache on.
		if _, err := r.loadSeccomp("", isolation.GVisor); err == nil {
			t.Fatal("a profile was accepted by a build that cannot compile it")
		}
		if f := r.seccompCacheFile(nil, isolation.GVisor); f != "" {
			t.Fatalf("cache file %q named without libseccomp", f)
		}
		return
	}
	first, err := r.loadSeccomp("", isolation.GVisor)
	if err != nil {
		t.Fatal(err)
	}
	file := r.seccompCacheFile(nil, isolation.GVisor)
	if _, err := os.Stat(file); err != nil {
		t.Fatalf("nothing cached: %v", err)
	}
	again, err := r.loadSeccomp("", isolation.GVisor)
	if err != nil || again.SHA256 != first.SHA256 || !bytes.Equal(again.JSON, first.JSON) || len(again.Spec.Syscalls) != len(first.Spec.Syscalls) {
		t.Fatalf("cached profile differs: %v", err)
	}
	// The other mode's profile differs and is keyed apart.
	native, err := r.loadSeccomp("", isolation.Seccomp)
	if err != nil || native.SHA256 == first.SHA256 || r.seccompCacheFile(nil, isolation.Seccomp) == file {
		t.Fatalf("modes share a cache entry: %v", err)
	}
	// An entry whose profile no longer matches its hash is not used.
	var tampered isolation.SeccompProfile
	b, _ := os.ReadFile(file)
	json.Unmarshal(b, &tampered)
	tampered.JSON = append(tampered.JSON, ' ')
	b, _ = json.Marshal(tampered)
	os.WriteFile(file, b, 0o600)
	if readCachedProfile(file) != nil {
		t.Error("a tampered entry was read back")
	}
	if p, err := r.loadSeccomp("", isolation.GVisor); err != nil || p.SHA256 != first.SHA256 || !bytes.Equal(p.JSON, first.JSON) {
		t.Errorf("not recompiled over a tampered entry: %v", err)
	}
}

// TestSeccompCacheSpecFromJSON: an entry whose spec was rewritten to allow
// everything, its JSON and hash left as they were, still gives runc the
// strict profile, the one its recorded hash names.
func TestSeccompCacheSpecFromJSON(t *testing.T) {
	if seccomp.LibVersion() == "" {
		t.Skip("no libseccomp: nothing is cached")
	}
	r := &Runner{root: t.TempDir()}
	strict, err := r.loadSeccomp("", isolation.Seccomp)
	if err != nil {
		t.Fatal(err)
	}
	file := r.seccompCacheFile(nil, isolation.Seccomp)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var entry isolation.SeccompProfile
	if err := json.Unmarshal(b, &entry); err != nil {
		t.Fatal(err)
	}
	entry.Spec = &specs.LinuxSeccomp{DefaultAction: specs.ActAllow, Architectures: strict.Spec.Architectures}
	b, _ = json.Marshal(entry)
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}

	if c := readCachedProfile(file); c == nil {
		t.Fatal("the entry is not a hit")
	}
	got, err := r.loadSeccomp("", isolation.Seccomp)
	if err != nil {
		t.Fatal(err)
	}
	if got.SHA256 != strict.SHA256 || !reflect.DeepEqual(got.Spec, strict.Spec) {
		t.Errorf("the cached spec was used: default action %s, %d rules; want %s, %d", got.Spec.DefaultAction, len(got.Spec.Syscalls), strict.Spec.DefaultAction, len(strict.Spec.Syscalls))
	}
	pol := isolation.Default()
	pol.Isolation = isolation.Seccomp
	pol.Seccomp = got
	s, err := isolation.OCISpec(pol, isolation.OCIJob{
		Rootfs: "/var/lib/airlock/rootfs/x", Argv: []string{"true"}, CgroupsPath: "/airlock/r1",
	})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Linux.Seccomp, strict.Spec) {
		t.Fatalf("OCISpec's seccomp is not the strict profile: default action %s", s.Linux.Seccomp.DefaultAction)
	}
}
