//go:build e2e

package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// example is one shell example of README.md: its commands, each with the
// output the README shows after it (none when it shows none).
type example struct {
	cmds []string
	want [][]string
}

// readmeExamples reads the fenced blocks of path whose lines start with
// "$ ": a "$ " line is a command, the lines after it its output.
func readmeExamples(t *testing.T, path string) []example {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []example
	var cur *example
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```"):
			if in && cur != nil {
				out = append(out, *cur)
			}
			in, cur = !in, nil
		case !in:
		case strings.HasPrefix(line, "$ "):
			if cur == nil {
				cur = &example{}
			}
			cur.cmds = append(cur.cmds, strings.TrimPrefix(line, "$ "))
			cur.want = append(cur.want, nil)
		case cur != nil:
			cur.want[len(cur.want)-1] = append(cur.want[len(cur.want)-1], line)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	// longNumber is a number in the README's output that varies from run
	// to run (a duration).
	longNumber = regexp.MustCompile(`[0-9]{4,}`)
	// marker ends a command's output in a block's stdout.
	marker = regexp.MustCompile(`\n?\n@@[0-9]+\n`)
)

// wantLine matches an output line the README shows: exactly, but for
// numbers of four digits or more (durations), which match any number.
func wantLine(shown string) *regexp.Regexp {
	return regexp.MustCompile(`^` + longNumber.ReplaceAllString(regexp.QuoteMeta(shown), `[0-9]+`) + `$`)
}

// The README's examples run as written, and print what it shows. Each
// block runs in one bash (set -e) in a directory whose bin/airlock is
// airlock on a root of the test's own, with the README's data file
// there. Three rewrites keep the host alone: sudo goes (the test is
// root), serve listens on a socket of the test's own (and curl asks it),
// and a TCP --listen takes a free port. A server a block starts in the
// background is waited for, and stopped with SIGTERM at the block's end.
func TestREADMEExamples(t *testing.T) {
	onlyPair(t, "oci", "gvisor") // the README's commands name no engine
	root := pauseRoot(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "api.sock")
	if err := os.Mkdir(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := fmt.Sprintf("#!/bin/sh\nexec %q --root %q \"$@\"\n", airlockBin, root)
	if err := os.WriteFile(filepath.Join(dir, "bin", "airlock"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "data.csv"), []byte("a,b\n1,2\n3,4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { readmeCleanup(t, root) })
	exs := readmeExamples(t, "../README.md")
	if len(exs) < 5 {
		t.Fatalf("README.md has %d shell examples; the parser lost them", len(exs))
	}
	rewrite := strings.NewReplacer(
		"sudo ", "",
		"bin/airlock serve", "bin/airlock serve --socket "+sock,
		"/run/airlock/airlock.sock", sock,
		"--listen 127.0.0.1:8787", "--listen 127.0.0.1:0",
	)
	for i, ex := range exs {
		var script strings.Builder
		script.WriteString("set -e\n")
		for j, c := range ex.cmds {
			c = rewrite.Replace(c)
			fmt.Fprintf(&script, "%s\nprintf '\\n@@%d\\n'\n", c, j)
			if strings.HasSuffix(strings.TrimSpace(strings.SplitN(c, " #", 2)[0]), "&") {
				fmt.Fprintf(&script, "for i in $(seq 400); do curl -sf --unix-socket %q http://airlock/v1/healthz >/dev/null && break; sleep 0.05; done\n", sock)
			}
		}
		script.WriteString("kill $(jobs -p) 2>/dev/null || true\nwait\n")
		cmd := exec.Command("bash", "-c", script.String())
		cmd.Dir = dir
		var stderr strings.Builder
		cmd.Stderr = &stderr
		begin := time.Now()
		out, err := cmd.Output()
		if err != nil {
			t.Errorf("example %d (%s): %v\nstdout: %s\nstderr: %s", i+1, ex.cmds[0], err, out, stderr.String())
			continue
		}
		t.Logf("example %d (%s): %v", i+1, ex.cmds[0], time.Since(begin).Round(time.Millisecond))
		chunks := marker.Split(string(out), -1)
		for j, want := range ex.want {
			if len(want) == 0 {
				continue
			}
			var got []string
			if j < len(chunks) {
				got = strings.Split(strings.TrimRight(chunks[j], "\n"), "\n")
			}
			if len(got) != len(want) {
				t.Errorf("example %d, `%s`: printed %q; the README shows %q", i+1, ex.cmds[j], got, want)
				continue
			}
			for k := range want {
				if !wantLine(want[k]).MatchString(got[k]) {
					t.Errorf("example %d, `%s`: printed %q; the README shows %q", i+1, ex.cmds[j], got[k], want[k])
				}
			}
		}
	}
}

// readmeCleanup removes what the examples leave: the sandboxes they do
// not remove, and their templates (with their snapshots).
func readmeCleanup(t *testing.T, root string) {
	var sbs []struct{ ID string }
	if err := json.Unmarshal([]byte(in(root, "sandbox", "ls", "--json").stdout), &sbs); err == nil {
		for _, sb := range sbs {
			in(root, "sandbox", "rm", sb.ID)
		}
	}
	var tpls []struct{ Name string }
	if err := json.Unmarshal([]byte(in(root, "template", "ls", "--json").stdout), &tpls); err == nil {
		for _, tp := range tpls {
			in(root, "template", "rm", tp.Name)
		}
	}
	if left := sandboxesIn(root); len(left) > 0 {
		t.Errorf("sandboxes left after the README's examples: %v", left)
	}
	out, err := exec.Command(filepath.Join(rootDir, "tools", "runsc"), "--root", filepath.Join(root, "oci", "runsc"), "list", "--quiet").Output()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("runsc containers left after the README's examples: %q (%v)", out, err)
	}
}
