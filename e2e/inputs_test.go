//go:build e2e

package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/runner"
)

// TestInputSwapRace: the owner of an --input tree keeps swapping a
// subdirectory with a symlink to a directory outside the tree while airlock
// copies it. The sandbox must never see the file outside.
func TestInputSwapRace(t *testing.T) {
	// Inputs are staged on the host, before the isolation mode enters.
	onlyPair(t, "", "gvisor")
	base := t.TempDir()
	secret := "SECRET-" + filepath.Base(base)
	outside, tree := filepath.Join(base, "outside"), filepath.Join(base, "tree")
	os.MkdirAll(outside, 0o755)
	os.MkdirAll(filepath.Join(tree, "sub"), 0o755)
	os.WriteFile(filepath.Join(outside, "secret.txt"), []byte(secret+"\n"), 0o644)
	for _, n := range []string{"a.txt", "b.txt", "c.txt"} {
		os.WriteFile(filepath.Join(tree, "sub", n), []byte("inside\n"), 0o644)
	}
	if err := os.Symlink(outside, filepath.Join(tree, "link")); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var swaps atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a, b := filepath.Join(tree, "sub"), filepath.Join(tree, "link")
		for {
			select {
			case <-stop:
				return
			default:
			}
			if unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE) == nil {
				swaps.Add(1)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	ran, refused := 0, 0
	for i := range 50 {
		c := airlock(nil, "run", "--json", "--image", busybox, "--input", tree+":/work/tree", "--",
			"sh", "-c", "cat /work/tree/*/* 2>/dev/null; true")
		if strings.Contains(c.stdout, secret) || strings.Contains(c.stderr, secret) {
			t.Fatalf("try %d: the sandbox printed the file outside the input tree", i)
		}
		var res runner.Result
		if err := json.Unmarshal([]byte(c.stdout), &res); err != nil {
			t.Fatalf("try %d: exit %d, stdout not JSON (%v): %q %s", i, c.code, err, c.stdout, c.stderr)
		}
		switch {
		case c.code == 0 && res.Reason == runner.ReasonExited:
			ran++
			if res.Receipt == nil {
				t.Fatalf("try %d: no receipt", i)
			}
			for _, f := range res.Receipt.Receipt.Inputs {
				if strings.Contains(f.Path, "secret") {
					t.Fatalf("try %d: the receipt lists %q as an input", i, f.Path)
				}
			}
		case c.code == 64 && res.ErrorKind == "invalid_input" && strings.Contains(res.Error, "changed while being copied"):
			refused++
		default:
			t.Fatalf("try %d: exit %d, %+v\nstderr: %s", i, c.code, res, c.stderr)
		}
	}
	if swaps.Load() == 0 || ran == 0 {
		t.Fatalf("%d swaps, %d runs: the race was not exercised", swaps.Load(), ran)
	}
	t.Logf("%d swaps; %d runs ran, %d refused as changed", swaps.Load(), ran, refused)
	noSandboxLeft(t)
}

// TestBatchInputConfined: job inputs resolve beneath the batch file's
// directory; one outside (by "..", an absolute path, a symlink, airlock's
// own keys), the jobs file itself, or a hard link another user made to a
// file of root's is that job's error while the other jobs run.
func TestBatchInputConfined(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	secret := "SECRET-" + filepath.Base(outside)
	os.WriteFile(filepath.Join(outside, "secret.txt"), []byte(secret+"\n"), 0o644)
	os.MkdirAll(filepath.Join(dir, "data"), 0o755)
	os.WriteFile(filepath.Join(dir, "data", "ok.txt"), []byte("ok\n"), 0o644)
	os.Symlink(outside, filepath.Join(dir, "out-link"))
	rel, err := filepath.Rel(dir, outside)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := filepath.Rel(dir, filepath.Join(rootDir, "keys"))
	if err != nil {
		t.Fatal(err)
	}
	// A user's directory in the tree, holding a link to root's file.
	os.MkdirAll(filepath.Join(dir, "users"), 0o755)
	if err := os.Link(filepath.Join(outside, "secret.txt"), filepath.Join(dir, "users", "secret.txt")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(dir, "users"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	jobs := map[string]string{
		"dotdot":   filepath.Join(rel, "secret.txt"),
		"abs":      filepath.Join(outside, "secret.txt"),
		"symlink":  "out-link/secret.txt",
		"keys":     keys,
		"passwd":   "/etc/passwd",
		"jobsfile": "jobs.jsonl",
		"hardlink": "users",
	}
	var lines []string
	add := func(id string, job map[string]any) {
		job["id"] = id
		b, _ := json.Marshal(job)
		lines = append(lines, string(b))
	}
	add("before", map[string]any{"argv": []string{"cat", "/work/data/ok.txt"}, "expected_stdout": "ok\n",
		"inputs": []map[string]string{{"host": "data", "sandbox": "/work/data"}}})
	for id, host := range jobs {
		add(id, map[string]any{"argv": []string{"sh", "-c", "cat /work/x /work/x/* 2>/dev/null; true"},
			"inputs": []map[string]string{{"host": host, "sandbox": "/work/x"}}})
	}
	add("after", map[string]any{"argv": []string{"cat", "/work/data/ok.txt"}, "expected_stdout": "ok\n",
		"inputs": []map[string]string{{"host": "data", "sandbox": "/work/data"}}})
	jobsPath, outPath := filepath.Join(dir, "jobs.jsonl"), filepath.Join(t.TempDir(), "results.jsonl")
	os.WriteFile(jobsPath, []byte(strings.Join(lines, "\n")+"\n"), 0o644)

	c := airlock(nil, "batch", jobsPath, "--out", outPath, "--engine", engineName, "--isolation", isolationName, "--image", busybox, "--parallel", "2")
	if c.code != 0 {
		t.Fatalf("batch: exit %d: %s", c.code, c.stderr)
	}
	results := readResults(t, outPath)
	for _, id := range []string{"before", "after"} {
		if r := results[id]; r.Pass == nil || !*r.Pass {
			t.Errorf("job %s: %+v", id, r)
		}
	}
	for id, host := range jobs {
		r, ok := results[id]
		switch {
		case !ok:
			t.Errorf("job %s (input %q): no result", id, host)
		case r.Reason != runner.ReasonError || r.ErrorKind != "invalid_input" || !strings.Contains(r.Error, host):
			t.Errorf("job %s (input %q): %s %s %q, want an invalid_input error naming the input", id, host, r.Reason, r.ErrorKind, r.Error)
		case strings.Contains(string(r.Stdout.Head), secret):
			t.Errorf("job %s printed the secret", id)
		}
	}
	b, _ := os.ReadFile(outPath)
	if strings.Contains(string(b), secret) {
		t.Error("the results hold the secret")
	}
	noSandboxLeft(t)
}

// TestInputAirlockRootRefused: airlock's own state is never an input, by
// any path to it.
func TestInputAirlockRootRefused(t *testing.T) {
	link := filepath.Join(t.TempDir(), "store")
	os.Symlink(filepath.Join(rootDir, "store"), link)
	for _, host := range []string{rootDir, filepath.Join(rootDir, "store"), link, filepath.Dir(rootDir)} {
		res, c := runJSON(t, nil, "--image", busybox, "--input", host+":/work/x", "--", "true")
		if c.code != 64 || res.ErrorKind != "invalid_input" || !strings.Contains(res.Error, "airlock's own state directory") {
			t.Errorf("--input %s: exit %d, %s %q", host, c.code, res.ErrorKind, res.Error)
		}
	}
	noSandboxLeft(t)
}
