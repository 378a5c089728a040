//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/runner"
)

// zygote is a warm Python program: it imports numpy, uses each generator
// once (as a real warm program may), says it is ready, and waits for its
// one job, /tmp/job, which says whether to reseed first ("reseed") or
// not ("raw"). The job's output, in /tmp/out, is what must differ from
// one sandbox restored from the snapshot to the next. reseed is what a
// warm program does on receiving its job (docs/snapshots.md).
const zygote = `
import json, os, random, socket, sys, tempfile, time, uuid
import numpy

def reseed():
    random.seed()
    numpy.random.seed()
    tempfile._name_sequence = None

random.random(); tempfile.mktemp(); numpy.random.random(); uuid.uuid4()
open(os.environ["AIRLOCK_READY_FILE"], "w").close()
while not os.path.exists("/tmp/job"):
    time.sleep(0.005)
if open("/tmp/job").read().strip() == "reseed":
    reseed()
out = {
    "os.urandom": os.urandom(16).hex(),
    "random.random": repr(random.random()),
    "uuid.uuid4": str(uuid.uuid4()),
    "tempfile.mktemp": tempfile.mktemp(),
    "numpy.random.random": repr(numpy.random.random()),
    "boot_id": open("/proc/sys/kernel/random/boot_id").read().strip(),
    "hostname": socket.gethostname(),
    "proc_hostname": open("/proc/sys/kernel/hostname").read().strip(),
}
with open("/tmp/out.new", "w") as f:
    json.dump(out, f)
os.rename("/tmp/out.new", "/tmp/out")
while True:
    time.sleep(3600)
`

// job hands the zygote of sandbox id its job and returns what it wrote.
func job(t *testing.T, root, id, kind string) map[string]string {
	t.Helper()
	out := mustIn(t, root, "exec", id, "--", "sh", "-c",
		"echo "+kind+" > /tmp/job.new && mv /tmp/job.new /tmp/job; i=0; while [ ! -e /tmp/out ] && [ $i -lt 1000 ]; do sleep 0.01; i=$((i+1)); done; cat /tmp/out")
	var m map[string]string
	if err := json.Unmarshal([]byte(out), &m); err != nil || len(m) != 8 {
		t.Fatalf("%s: the zygote answered %q (%v)", id, out, err)
	}
	return m
}

// The done-when case of templates with a snapshot: template create --warm
// snapshots a numpy-ready Python zygote; 20 sandboxes restored from it
// print distinct os.urandom, random.random, uuid4, mktemp and
// numpy.random values once the zygote reseeds on its job, and distinct
// boot ids and host names with or without it (airlock gives each its own:
// the host name is the one its record shows). Without the reseed, the
// values the clones share are logged (random's, numpy's and tempfile's
// generators are in the snapshot). template rm removes the snapshot; reap
// removes one no template names; nothing is left of any sandbox.
func TestTemplateSnapshot(t *testing.T) {
	onlyPair(t, "oci", "gvisor") // it names its engine and isolation
	root := pauseRoot(t)
	c := in(root, "template", "create", "snap-py", "--engine", "oci", "--json", "--warm", "--", "python3", "-c", zygote)
	if c.code != 0 {
		t.Fatalf("template create --warm: exit %d: %s", c.code, c.stderr)
	}
	var tpl struct {
		Engine, Snapshot string
		Warm             []string
	}
	if err := json.Unmarshal([]byte(c.stdout), &tpl); err != nil || len(tpl.Snapshot) != 64 || tpl.Engine != "oci" || len(tpl.Warm) != 3 {
		t.Fatalf("template create --json: %q (%v)", c.stdout, err)
	}
	if !strings.Contains(c.stderr, "snapshot "+tpl.Snapshot+" taken") {
		t.Errorf("no progress on stderr: %q", c.stderr)
	}
	snapDir := filepath.Join(root, "oci", "snapshots", tpl.Snapshot)
	if fi, err := os.Stat(snapDir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("snapshot directory: %v", err)
	}
	removed := false
	t.Cleanup(func() {
		if !removed {
			in(root, "template", "rm", "snap-py")
		}
	})

	const n = 20
	var ids []string
	seen := map[string]map[string]string{}
	for i := 0; i < n; i++ {
		begin := time.Now()
		var si runner.SandboxInfo
		if err := json.Unmarshal([]byte(mustIn(t, root, "sandbox", "create", "--template", "snap-py", "--json")), &si); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			t.Logf("sandbox create --template snap-py: %v", time.Since(begin))
		}
		ids = append(ids, si.ID)
		t.Cleanup(func() { in(root, "sandbox", "rm", si.ID) })
		if si.Snapshot != tpl.Snapshot {
			t.Fatalf("sandbox %s: snapshot %q; want the template's %s", si.ID, si.Snapshot, tpl.Snapshot)
		}
		out := job(t, root, si.ID, "reseed")
		if h := out["hostname"]; si.Policy == nil || h != si.Policy.Hostname || h != out["proc_hostname"] || !strings.HasPrefix(h, "sandbox-") {
			t.Errorf("%s: host name %q, /proc's %q; want the one its record shows, sandbox-…", si.ID, h, out["proc_hostname"])
		}
		delete(out, "proc_hostname")
		for k, v := range out {
			if seen[k] == nil {
				seen[k] = map[string]string{}
			}
			if other, dup := seen[k][v]; dup {
				t.Errorf("%s: %s gave %s in %s too", si.ID, k, v, other)
			}
			seen[k][v] = si.ID
		}
	}
	t.Logf("reseeded: %d clones, distinct values of each: %v", n, counts(seen))
	for k, vs := range seen {
		if len(vs) != n {
			t.Errorf("%s: %d distinct values in %d clones", k, len(vs), n)
		}
	}

	// An exec's result, and its signed receipt, name the snapshot.
	out := mustIn(t, root, "exec", "--json", ids[0], "--", "true")
	var res runner.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Snapshot != tpl.Snapshot || res.Receipt == nil || res.Receipt.Receipt.Snapshot != tpl.Snapshot {
		t.Errorf("exec in a restored sandbox: snapshot %q (%v); want the template's %s in the result and its receipt", res.Snapshot, err, tpl.Snapshot)
	}
	if res.Policy == nil || res.Receipt == nil || res.Policy.Hostname != res.Receipt.Receipt.Policy.Hostname || !strings.HasPrefix(res.Policy.Hostname, "sandbox-") {
		t.Errorf("exec in a restored sandbox: the result's policy names host %+v; want its own name, as its receipt", res.Policy)
	}
	resFile := filepath.Join(t.TempDir(), "result.json")
	os.WriteFile(resFile, []byte(out), 0o600)
	if v := in(root, "receipt", "verify", resFile); v.code != 0 || !strings.Contains(v.stdout, "restored from snapshot sha256:"+tpl.Snapshot) {
		t.Errorf("receipt verify: exit %d %s%s", v.code, v.stdout, v.stderr)
	}
	forged := strings.Replace(out, tpl.Snapshot, strings.Repeat("0", 64), 1)
	os.WriteFile(resFile, []byte(forged), 0o600)
	if v := in(root, "receipt", "verify", resFile); v.code != 65 || !strings.Contains(v.stderr, "snapshot") {
		t.Errorf("receipt verify of a result naming another snapshot: exit %d %s", v.code, v.stderr)
	}

	// A narrowed policy is not the snapshot's: refused, naming the fix,
	// and nothing is left of the attempt.
	if r := in(root, "sandbox", "create", "--template", "snap-py", "--memory", "128MiB"); r.code != 64 || !strings.Contains(r.stderr, "policy") || !strings.Contains(r.stderr, "--replace --warm") {
		t.Errorf("a narrowed create from the snapshot: exit %d: %s; want 64 naming the policy and the fix", r.code, r.stderr)
	}
	if got := len(sandboxesIn(root)); got != 2*n {
		t.Errorf("%d sandbox records after a refused create; want the %d made", got/2, n)
	}

	// A run on the template restores as a create does: one exec of a
	// sandbox of its own, its /out collected and its result and receipt
	// naming the snapshot; nothing of the sandbox is left after it. A
	// narrowed run does not fit the snapshot, and boots.
	rout := in(root, "run", "--template", "snap-py", "--json", "--", "sh", "-c", "echo hi > /out/hi.txt; cat /proc/sys/kernel/hostname")
	var rres runner.Result
	if err := json.Unmarshal([]byte(rout.stdout), &rres); err != nil || rout.code != 0 || rres.Snapshot != tpl.Snapshot || rres.Receipt == nil || rres.Receipt.Receipt.Snapshot != tpl.Snapshot {
		t.Fatalf("run --template on a snapshot: exit %d, snapshot %q (%v): %s; want the template's in the result and its receipt", rout.code, rres.Snapshot, err, rout.stderr)
	}
	if got := string(rres.Stdout.Head); !strings.HasPrefix(got, "sandbox-") || len(rres.Artifacts) != 1 || rres.Artifacts[0].Path != "hi.txt" || len(rres.Receipt.Receipt.Artifacts) != 1 {
		t.Errorf("run --template on a snapshot: stdout %q, artifacts %+v; want its own host name and /out/hi.txt, in the receipt too", got, rres.Artifacts)
	}
	os.WriteFile(resFile, []byte(rout.stdout), 0o600)
	if v := in(root, "receipt", "verify", resFile); v.code != 0 || !strings.Contains(v.stdout, "restored from snapshot sha256:"+tpl.Snapshot) {
		t.Errorf("receipt verify of a restored run: exit %d %s%s", v.code, v.stdout, v.stderr)
	}
	cold := in(root, "run", "--template", "snap-py", "--json", "--memory", "128MiB", "--", "true")
	var cres runner.Result
	if err := json.Unmarshal([]byte(cold.stdout), &cres); err != nil || cold.code != 0 || cres.Snapshot != "" || cres.SandboxID != "" {
		t.Errorf("a narrowed run --template: exit %d, snapshot %q, sandbox %q (%v): %s; want a cold run", cold.code, cres.Snapshot, cres.SandboxID, err, cold.stderr)
	}
	if got := len(sandboxesIn(root)); got != 2*n {
		t.Errorf("%d sandbox records after the runs; want the %d made", got/2, n)
	}

	// Without the reseed: what the clones share on their own.
	raw := map[string]map[string]bool{}
	for i := 0; i < 3; i++ {
		si := mustIn(t, root, "sandbox", "create", "--template", "snap-py")
		t.Cleanup(func() { in(root, "sandbox", "rm", si) })
		ids = append(ids, si)
		for k, v := range job(t, root, si, "raw") {
			if raw[k] == nil {
				raw[k] = map[string]bool{}
			}
			raw[k][v] = true
		}
	}
	var shared []string
	for k, vs := range raw {
		if len(vs) == 1 {
			shared = append(shared, k)
		}
	}
	t.Logf("without a reseed, 3 clones share: %v", shared)
	for _, k := range []string{"os.urandom", "uuid.uuid4", "boot_id", "hostname"} {
		if len(raw[k]) != 3 {
			t.Errorf("%s repeats across clones without help: %v", k, raw[k])
		}
	}

	for _, id := range ids {
		mustIn(t, root, "sandbox", "rm", id)
	}
	// pauseLeftOf lists every sandbox's leftovers under root.
	if left := pauseLeftOf(root, ids[0]); len(left) > 0 {
		t.Errorf("left after sandbox rm: %v", left)
	}
	mustIn(t, root, "template", "rm", "snap-py")
	removed = true
	if _, err := os.Stat(snapDir); !os.IsNotExist(err) {
		t.Errorf("template rm left its snapshot: %v", err)
	}

	// A snapshot no template names, old enough, goes at reap.
	stray := filepath.Join(root, "oci", "snapshots", strings.Repeat("ab", 32))
	if err := os.MkdirAll(stray, 0o700); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	os.Chtimes(stray, old, old)
	if out := mustIn(t, root, "reap"); !strings.Contains(out, "snapshot "+filepath.Base(stray)) {
		t.Errorf("reap: %q; want the stray snapshot named", out)
	}
	if _, err := os.Stat(stray); !os.IsNotExist(err) {
		t.Errorf("reap left a snapshot no template names: %v", err)
	}
}

func counts(m map[string]map[string]string) map[string]int {
	out := map[string]int{}
	for k, v := range m {
		out[k] = len(v)
	}
	return out
}

// A template under runc, or on the docker engine, takes no --warm: it is
// refused before anything is made, naming the fix.
func TestTemplateSnapshotRefused(t *testing.T) {
	onlyPair(t, "oci", "gvisor") // it names its engine and isolation
	root := pauseRoot(t)
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"--engine", "oci", "--isolation", "seccomp"}, "gvisor"},
		{[]string{"--engine", "docker"}, "engine oci"},
	} {
		args := append(append([]string{"template", "create", "snap-refused"}, c.args...), "--warm", "--", "true")
		r := in(root, args...)
		if r.code == 0 || !strings.Contains(r.stderr, c.says) {
			t.Errorf("%v: exit %d: %s; want a refusal naming %q", c.args, r.code, r.stderr, c.says)
		}
		if r := in(root, "template", "inspect", "snap-refused"); r.code == 0 {
			t.Errorf("%v: the refused template was stored", c.args)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "oci", "snapshots")); len(ents) > 0 {
		t.Errorf("a refusal left a snapshot: %v", ents)
	}
	if left := sandboxesIn(root); len(left) > 0 {
		t.Errorf("a refusal left sandboxes: %v", left)
	}
}

// A warm program that keeps a file of its sandbox's /tmp or workspace
// open once ready makes a snapshot no sandbox can be restored from (each
// gets fresh areas): template create restores one sandbox from it before
// storing the template, and refuses it (exit 64), naming the file and the
// fix. Nothing is left, and a template it was to replace stays as it was.
func TestTemplateSnapshotKeptOpen(t *testing.T) {
	onlyPair(t, "oci", "gvisor") // it names its engine and isolation
	root := pauseRoot(t)
	const ready = "import os, time\n%sopen(os.environ['AIRLOCK_READY_FILE'], 'w').close()\nwhile True:\n    time.sleep(3600)\n"
	good := in(root, "template", "create", "snap-open", "--engine", "oci", "--json", "--warm", "--", "python3", "-c", fmt.Sprintf(ready, ""))
	var tpl struct{ Snapshot string }
	if err := json.Unmarshal([]byte(good.stdout), &tpl); err != nil || good.code != 0 || len(tpl.Snapshot) != 64 {
		t.Fatalf("template create --warm of a program that closes its files: exit %d (%v): %s", good.code, err, good.stderr)
	}
	t.Cleanup(func() { in(root, "template", "rm", "snap-open") })
	if i := strings.Index(good.stderr, "a sandbox restores from the snapshot"); i < 0 {
		t.Errorf("no progress line for the restore check: %q", good.stderr)
	} else {
		t.Logf("%s", strings.TrimSpace(good.stderr[i:]))
	}
	for _, c := range []struct{ open, says string }{
		{"f = open('/tmp/x', 'w')\n", `"/tmp/x"`},
		{"os.mkdir('/home/user/d')\nf = open('/home/user/d/data', 'w')\n", `"/home/user/d" (or a file beneath it)`},
	} {
		r := in(root, "template", "create", "snap-open", "--replace", "--engine", "oci", "--warm", "--", "python3", "-c", fmt.Sprintf(ready, c.open))
		t.Logf("keeping %s open: exit %d: %s", c.says, r.code, r.stderr)
		if r.code != 64 {
			t.Errorf("template create --warm of a program keeping %s open: exit %d: %s; want 64", c.says, r.code, r.stderr)
		}
		for _, want := range []string{"was not stored", c.says, "close its files under /tmp, /home/user and /out"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("template create --warm of a program keeping %s open: %q; want it to say %q", c.says, r.stderr, want)
			}
		}
		var kept struct{ Snapshot string }
		if err := json.Unmarshal([]byte(mustIn(t, root, "template", "inspect", "snap-open")), &kept); err != nil || kept.Snapshot != tpl.Snapshot {
			t.Errorf("the template after a refused replacement names snapshot %q (%v); want its own %s", kept.Snapshot, err, tpl.Snapshot)
		}
		if ents, _ := os.ReadDir(filepath.Join(root, "oci", "snapshots")); len(ents) != 1 || ents[0].Name() != tpl.Snapshot {
			t.Errorf("snapshots after a refused create: %v; want only the template's %s", ents, tpl.Snapshot)
		}
		if left := sandboxesIn(root); len(left) > 0 {
			t.Errorf("a refused create left sandboxes: %v", left)
		}
	}
	if si := in(root, "sandbox", "create", "--template", "snap-open"); si.code != 0 {
		t.Errorf("sandbox create from the template kept: exit %d: %s", si.code, si.stderr)
	} else {
		in(root, "sandbox", "rm", strings.TrimSpace(si.stdout))
	}
}

// sandboxesIn lists the sandboxes' records under root.
func sandboxesIn(root string) []string {
	ents, _ := os.ReadDir(filepath.Join(root, "sandboxes"))
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), "sb-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// A run on a run-code template restores its fork server: `python3 -c
// CODE ARGS` (and `python3 FILE ARGS`) is one job of the server, forked
// by it with the template's modules loaded; any other program (here the
// program on stdin) an exec beside it. Both name the snapshot, and
// neither leaves its sandbox behind.
func TestTemplateRunCodeRun(t *testing.T) {
	onlyPair(t, "oci", "gvisor") // it names its engine and isolation
	root := pauseRoot(t)
	if c := in(root, "template", "create", "rc-run", "--engine", "oci", "--run-code", "python", "--import", "decimal"); c.code != 0 {
		t.Fatalf("template create --run-code: exit %d: %s", c.code, c.stderr)
	}
	t.Cleanup(func() { in(root, "template", "rm", "rc-run") })
	const job = "import os, sys\ntry:\n    server = open('/proc/%d/cmdline' % os.getppid(), 'rb').read()\nexcept OSError:\n    server = b''\nprint(b'airlock-run-code' in server, 'decimal' in sys.modules, sys.argv[1:])\n"
	stdinJob := filepath.Join(t.TempDir(), "job.py")
	os.WriteFile(stdinJob, []byte(job), 0o644)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--", "python3", "-c", job, "a"}, "True True ['a']\n"},
		{[]string{"--stdin", stdinJob, "--", "python3", "-", "b"}, "False False ['b']\n"},
	} {
		r := in(root, append([]string{"run", "--template", "rc-run", "--json"}, c.args...)...)
		var res runner.Result
		if err := json.Unmarshal([]byte(r.stdout), &res); err != nil || r.code != 0 || len(res.Snapshot) != 64 || string(res.Stdout.Head) != c.want {
			t.Errorf("run --template rc-run %v: exit %d, snapshot %q, stdout %q, stderr %q (%v): %s; want %q, restored", c.args[len(c.args)-2:], r.code, res.Snapshot, res.Stdout.Head, res.Stderr.Head, err, r.stderr, c.want)
		}
	}
	if left := sandboxesIn(root); len(left) > 0 {
		t.Errorf("runs left sandboxes: %v", left)
	}
}
