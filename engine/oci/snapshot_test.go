package oci

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/internal/agent"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/units"
)

func testManifest() *snapshotManifest {
	p := isolation.Default()
	return &snapshotManifest{
		Version: manifestVersion, Image: digest.FromString("image"), Policy: policyDigest(p), Runtime: "runsc version 1",
		Agent: true, AgentVersion: agent.Version, BootID: true, Files: map[string]string{"checkpoint.img": strings.Repeat("a", 64), "pages.img": strings.Repeat("b", 64)},
		CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

// A manifest is named by its bytes' hash; a manifest whose bytes change,
// or that is not one, is data loss, never used.
func TestSnapshotManifestName(t *testing.T) {
	m := testManifest()
	b, name := m.encode()
	if err := checkSnapshotName(name); err != nil {
		t.Fatal(err)
	}
	if b2, name2 := testManifest().encode(); name2 != name || string(b2) != string(b) {
		t.Fatalf("one manifest, two names: %s, %s", name, name2)
	}
	got, err := decodeManifest(name, b)
	if err != nil {
		t.Fatal(err)
	}
	if _, again := got.encode(); again != name {
		t.Fatalf("decoded manifest encodes to %s, not %s", again, name)
	}
	m.Files["pages.img"] = strings.Repeat("c", 64)
	if _, other := m.encode(); other == name {
		t.Fatal("a file's hash changed and the name did not")
	}
	for _, c := range []struct {
		name string
		b    string
	}{
		{"tampered", strings.Replace(string(b), "runsc version 1", "runsc version 2", 1)},
		{"empty", ""},
	} {
		if _, err := decodeManifest(name, []byte(c.b)); !errors.Is(err, errdefs.ErrDataLoss) {
			t.Errorf("%s: decodeManifest = %v; want data loss", c.name, err)
		}
	}
	// Bytes that hash to their name but are no manifest of this version.
	junk := []byte(`{"version":99}`)
	sum := sha256.Sum256(junk)
	if _, err := decodeManifest(hex.EncodeToString(sum[:]), junk); !errors.Is(err, errdefs.ErrDataLoss) {
		t.Errorf("version 99: %v; want data loss", err)
	}
	for _, bad := range []string{"", "../x", strings.Repeat("A", 64), strings.Repeat("a", 63)} {
		if err := checkSnapshotName(bad); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("checkSnapshotName(%q) = %v", bad, err)
		}
	}
}

// A snapshot serves only a sandbox of its image, exact policy, runsc and
// mounts; each mismatch is refused as invalid input naming it and
// the fix.
func TestSnapshotFits(t *testing.T) {
	m := testManifest()
	want := snapshotWant{Image: m.Image, Policy: m.Policy, Runtime: m.Runtime, Agent: true, BootID: true}
	if err := m.fits("x", want); err != nil {
		t.Fatalf("the snapshot's own settings: %v", err)
	}
	narrowed := isolation.Default()
	narrowed.Limits.Memory /= 2
	seccompOnly := isolation.Default()
	seccompOnly.Isolation = isolation.Seccomp
	withProfile := isolation.Default()
	withProfile.Seccomp = &isolation.SeccompProfile{SHA256: strings.Repeat("f", 64)}
	for _, c := range []struct {
		name   string
		change func(*snapshotWant)
		says   string
	}{
		{"image", func(w *snapshotWant) { w.Image = digest.FromString("other") }, "image"},
		{"narrowed memory", func(w *snapshotWant) { w.Policy = policyDigest(narrowed) }, "policy"},
		{"isolation", func(w *snapshotWant) { w.Policy = policyDigest(seccompOnly) }, "policy"},
		{"seccomp profile", func(w *snapshotWant) { w.Policy = policyDigest(withProfile) }, "policy"},
		{"runsc", func(w *snapshotWant) { w.Runtime = "runsc version 2" }, "runsc"},
		{"agent", func(w *snapshotWant) { w.Agent = false }, "agent"},
		{"boot id", func(w *snapshotWant) { w.BootID = false }, "boot id"},
	} {
		w := want
		c.change(&w)
		err := m.fits("x", w)
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("%s: fits = %v; want invalid input", c.name, err)
			continue
		}
		if !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "template create") {
			t.Errorf("%s: %q does not name %q and the fix", c.name, err, c.says)
		}
	}
	if policyDigest(isolation.Default()) != policyDigest(isolation.Default()) {
		t.Error("one policy, two digests")
	}
	// A manifest from before boot ids were bound has no boot_id: its
	// snapshot lacks the mount, and runsc would refuse it less clearly.
	b, _ := m.encode()
	old := strings.Replace(string(b), `"boot_id":true,`, "", 1)
	sum := sha256.Sum256([]byte(old))
	om, err := decodeManifest(hex.EncodeToString(sum[:]), []byte(old))
	if err != nil || old == string(b) {
		t.Fatalf("an older manifest: %v (%s)", err, old)
	}
	if err := om.fits("x", want); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "boot id") {
		t.Errorf("a snapshot without its own boot id: fits = %v; want invalid input naming the boot id", err)
	}
	// A snapshot holds its agent process: one of another wire format (or
	// of before the format was recorded) would not be taken by this host.
	for _, v := range []string{"", "airlock-agent/1"} {
		om := testManifest()
		om.AgentVersion = v
		if err := om.fits("x", want); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "exec agent speaking") || !strings.Contains(err.Error(), "template create") {
			t.Errorf("agent version %q: fits = %v; want invalid input naming the agent and the fix", v, err)
		}
	}
}

// A policy without egress digests as it did before egress could be
// snapshotted, so the snapshots of existing templates still fit. With
// egress, only that it is on counts: the allowlist, the credential
// routes and the byte cap are the proxy's, and a run may narrow them.
func TestPolicyDigestEgress(t *testing.T) {
	p := isolation.Policy{Isolation: isolation.GVisor, Limits: isolation.Limits{Memory: 512 << 20, CPUs: 1, Pids: 256, Timeout: 30 * time.Second, Output: 1 << 20},
		UID: 65534, GID: 65534, Hostname: "airlock"}
	if got := policyDigest(p); got != "01e601b29e59699ece0cbfb2b21092bee9082a08a7590d7ddd7922e02f41fa4a" {
		t.Errorf("a policy without egress digests as %s, not as it always did", got)
	}
	withEgress := func(bytes units.Bytes, hosts ...string) isolation.Policy {
		allow, err := egress.ParseAllowlist(hosts)
		if err != nil {
			t.Fatal(err)
		}
		q := p
		q.Egress = isolation.Egress{Allow: allow, Bytes: bytes}
		return q
	}
	wide := policyDigest(withEgress(0, "pypi.org", "files.pythonhosted.org"))
	if wide == policyDigest(p) {
		t.Error("egress on and off digest alike")
	}
	if narrow := policyDigest(withEgress(1<<20, "pypi.org")); narrow != wide {
		t.Error("a narrowed allowlist and byte cap do not fit the template's snapshot")
	}
	cred, err := egress.ParseCredential("api.example.com=Authorization:@/run/secrets/key")
	if err != nil {
		t.Fatal(err)
	}
	q := p
	q.Egress = isolation.Egress{Credentials: []egress.Credential{cred}}
	if policyDigest(q) != wide {
		t.Error("a credential route alone digests unlike an allowlist: both give the sandbox the same interface")
	}
}

// A restore that fails because a file the warm program kept open is not
// in the new sandbox's areas is told apart from runsc's log line, with
// the file's path in the sandbox; any other failure is not.
func TestUnreopened(t *testing.T) {
	const pre = `W1207 15:25:47.771609    5413 util.go:107] FATAL ERROR: starting container: restoring container "airlock-a": failed to load kernel: vfs.CompleteRestore() failed: failed to complete restore for filesystem type "9p": `
	for _, c := range []struct {
		log  string
		path string
		dir  bool
		ok   bool
	}{
		{pre + `failed to walk "x" of type 0100000 in mount "__no_name_0:/tmp": no such file or directory`, "/tmp/x", false, true},
		{pre + `failed to walk "d\n\"q" of type 040000 in mount "__no_name_0:/tmp": no such file or directory`, "/tmp/d\n\"q", true, true},
		{pre + `failed to walk "data.db" of type 0100000 in mount "/var/lib/air:lock/x:/home/user": no such file or directory`, "/home/user/data.db", false, true},
		{"I1207 some line\n" + pre + `failed to walk "a b" of type 0100000 in mount "__no_name_2:/out": no such file or directory` + "\nW1207 Failure to execute command, err: 1\n", "/out/a b", false, true},
		{pre + `failed to walk "x" of type 0100000 in mount "/": no such file or directory`, "", false, false},
		{pre + `failed to walk "" of type 0100000 in mount "m:/tmp": no such file or directory`, "", false, false},
		{pre + `failed to walk "x\q" of type 0100000 in mount "m:/tmp": no such file or directory`, "", false, false},
		{pre + `failed to walk "x" of type 0100000 in mount "m:/tmp`, "", false, false},
		{`FATAL ERROR: starting container: mount "/tmp" does not match the checkpoint's`, "", false, false},
		{"", "", false, false},
	} {
		path, dir, ok := unreopened([]byte(c.log))
		if path != c.path || dir != c.dir || ok != c.ok {
			t.Errorf("unreopened(%q) = %q, %v, %v; want %q, %v, %v", c.log, path, dir, ok, c.path, c.dir, c.ok)
		}
	}

	snap := strings.Repeat("c", 64)
	err := unreopenedError(snap, []byte(pre+`failed to walk "x\x1b[2J" of type 0100000 in mount "__no_name_0:/tmp": no such file or directory`))
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Fatalf("unreopenedError = %v; want invalid input (a restore from it can never succeed)", err)
	}
	for _, want := range []string{snap, `"/tmp/x\x1b[2J"`, "fresh /tmp", "close its files under /tmp, /home/user and /out", "--replace --warm"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "\x1b") {
		t.Errorf("%q passes the sandbox's escape through", err)
	}
	if err := unreopenedError(snap, []byte(pre+`failed to walk "d" of type 040000 in mount "m:/home/user": no such file or directory`)); err == nil || !strings.Contains(err.Error(), `"/home/user/d" (or a file beneath it)`) {
		t.Errorf("a directory: %v; want it named, with the files beneath it", err)
	}
	if err := unreopenedError(snap, []byte("FATAL ERROR: something else")); err != nil {
		t.Errorf("another failure: %v; want nil (runsc's own error stands)", err)
	}
}
