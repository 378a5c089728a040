//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/imagetest"
)

// example is one shell block of a document: its commands, each with the
// output the document shows after it (none when it shows none).
type example struct {
	line int    // the block's first line in its document
	skip string // why it is not run: a "<!-- not run: … -->" line before it
	cmds []string
	want [][]string
}

// notRun, on the line before a block, keeps the block out of the tests
// and says why; nothing else does.
var notRun = regexp.MustCompile(`^<!-- not run: (.+) -->$`)

// docExamples reads the fenced blocks of path whose lines start with
// "$ ": a "$ " line is a command (continued on the next line when it
// ends with a backslash), the lines after it its output.
func docExamples(t *testing.T, path string) []example {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []example
	var cur *example
	in, cont := false, false
	prev, skip := "", ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```"):
			if in && cur != nil {
				out = append(out, *cur)
			}
			if !in {
				skip = ""
				if m := notRun.FindStringSubmatch(prev); m != nil {
					skip = m[1]
				}
			}
			in, cur, cont = !in, nil, false
		case !in:
		case cont:
			cur.cmds[len(cur.cmds)-1] += "\n" + line
			cont = strings.HasSuffix(line, `\`)
		case strings.HasPrefix(line, "$ "):
			if cur == nil {
				cur = &example{line: n, skip: skip}
			}
			cur.cmds = append(cur.cmds, strings.TrimPrefix(line, "$ "))
			cur.want = append(cur.want, nil)
			cont = strings.HasSuffix(line, `\`)
		case cur != nil:
			cur.want[len(cur.want)-1] = append(cur.want[len(cur.want)-1], line)
		}
		if strings.TrimSpace(line) != "" {
			prev = line
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

var (
	// variable is what differs from run to run in a document's output:
	// "…" (anything), a date and time, a duration, a hex id or digest,
	// a number of four or more digits (a size, a pid).
	variable = regexp.MustCompile(`…|[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9]{2}:[0-9]{2}(?::[0-9]{2})?|\b[0-9]+(?:\.[0-9]+)?(?:µs|ms|s)\b|[0-9a-f]{8,}|[0-9]{4,}`)
	// marker ends a command's output in a block's stdout, with its status.
	marker = regexp.MustCompile(`\n?\n@@([0-9]+) ([0-9]+)\n`)
	// comment is a command's trailing comment.
	comment = regexp.MustCompile(`\s+# [^'"]*$`)
	spaces  = regexp.MustCompile(` +`)
)

// wantLine matches an output line a document shows: exactly, but for
// what is variable, and for runs of spaces (table columns), which match
// any run.
func wantLine(shown string) *regexp.Regexp {
	var re strings.Builder
	re.WriteString("^")
	literal := func(s string) { re.WriteString(spaces.ReplaceAllString(regexp.QuoteMeta(s), " +")) }
	last := 0
	for _, m := range variable.FindAllStringIndex(shown, -1) {
		literal(shown[last:m[0]])
		switch v := shown[m[0]:m[1]]; {
		case v == "…":
			re.WriteString(".*")
		case strings.Contains(v, ":"):
			re.WriteString(`[0-9]{4}-[0-9]{2}-[0-9]{2}[ T][0-9:]+`)
		case strings.HasSuffix(v, "s"):
			re.WriteString(`[0-9.]+(?:µs|ms|s)`)
		default:
			re.WriteString(`[0-9a-f]+`)
		}
		last = m[1]
	}
	literal(shown[last:])
	re.WriteString("$")
	return regexp.MustCompile(re.String())
}

// matchOutput says whether got is the output shown: line by line, where
// a line that is only "…" stands for any number of lines.
func matchOutput(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	if strings.TrimSpace(want[0]) == "…" {
		for i := 0; i <= len(got); i++ {
			if matchOutput(want[1:], got[i:]) {
				return true
			}
		}
		return false
	}
	return len(got) > 0 && wantLine(want[0]).MatchString(got[0]) && matchOutput(want[1:], got[1:])
}

// lines splits a command's output into lines, none when it printed
// nothing.
func lines(s string) []string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// mayFail says whether a command is shown failing: airlock's refusal is
// in its output.
func mayFail(want []string) bool {
	for _, l := range want {
		if strings.HasPrefix(l, "airlock: ") {
			return true
		}
	}
	return false
}

// runExamples runs the examples of a document as written and checks
// that they print what it shows. Each block runs in one bash, in a fresh
// copy of testdata/docs (the files the examples name), where airlock and
// bin/airlock are airlock on root. A command must succeed unless the
// document shows airlock refusing it. Three rewrites keep the host
// alone: sudo goes (the test is root), serve listens on a socket of the
// test's own (and curl asks it), and a TCP --listen takes a free port. A
// server a block starts in the background is waited for (and its pools
// for their sandboxes), and stopped with SIGTERM at the block's end.
func runExamples(t *testing.T, root, doc string, prepare func(t *testing.T, dir string)) {
	exs := docExamples(t, doc)
	if len(exs) == 0 {
		t.Fatalf("%s has no shell examples; the parser lost them", doc)
	}
	for _, ex := range exs {
		name := fmt.Sprintf("%s:%d (%s)", filepath.Base(doc), ex.line, ex.cmds[0])
		if ex.skip != "" {
			t.Logf("%s: not run: %s", name, ex.skip)
			continue
		}
		runExample(t, root, name, ex, prepare)
	}
}

func runExample(t *testing.T, root, name string, ex example, prepare func(t *testing.T, dir string)) {
	dir := t.TempDir()
	if err := os.CopyFS(dir, os.DirFS("testdata/docs")); err != nil {
		t.Fatal(err)
	}
	if prepare != nil {
		prepare(t, dir)
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "api.sock")
	wrapper := fmt.Sprintf("#!/bin/sh\nexec %q --root %q \"$@\"\n", airlockBin, root)
	if err := os.WriteFile(filepath.Join(dir, "bin", "airlock"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	rewrite := strings.NewReplacer(
		"sudo ", "",
		"airlock serve", "airlock serve --socket "+sock,
		"/run/airlock/airlock.sock", sock,
		"--listen 127.0.0.1:8787", "--listen 127.0.0.1:0",
	)
	// Each command's stderr goes to a file of its own (a terminal shows
	// both streams; a document may show either, or both).
	var script strings.Builder
	for j, c := range ex.cmds {
		c = rewrite.Replace(c)
		bare := comment.ReplaceAllString(c, "")
		bg := strings.HasSuffix(bare, "&")
		if bg {
			c = strings.TrimSuffix(bare, "&") + " >>background.log 2>&1 &"
		}
		fmt.Fprintf(&script, "{\n%s\n} 2>stderr.%d\n__s=$?; printf '\\n@@%d %%d\\n' $__s\n", c, j, j)
		if !mayFail(ex.want[j]) {
			script.WriteString("[ $__s -eq 0 ] || exit 0\n")
		}
		if bg {
			fmt.Fprintf(&script, "for i in $(seq 400); do curl -sf --unix-socket %q http://airlock/v1/healthz >/dev/null && break; sleep 0.05; done\n", sock)
			// Until every pool is full: ready = size for each template.
			fmt.Fprintf(&script, "for i in $(seq 600); do curl -sf --unix-socket %q -o metrics.txt http://airlock/metrics && awk '%s' metrics.txt && break; sleep 0.1; done\n", sock,
				`/^airlock_pool_size{/ {s[substr($1, 18)] = $2} /^airlock_pool_ready{/ {r[substr($1, 19)] = $2} END {for (k in s) if (s[k] != r[k]) exit 1}`)
		}
		script.WriteString("(exit $__s)\n")
	}
	script.WriteString("kill $(jobs -p) 2>/dev/null || true\nwait\n")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	// A block cut short takes what it started with it, and its output is
	// read only until then.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(dir, "bin")+":"+os.Getenv("PATH"))
	begin := time.Now()
	out, err := cmd.Output()
	if err != nil {
		t.Errorf("%s: %v\noutput: %s", name, err, out)
		return
	}
	t.Logf("%s: %v", name, time.Since(begin).Round(time.Millisecond))
	bgLog := func() string {
		b, _ := os.ReadFile(filepath.Join(dir, "background.log"))
		if len(b) == 0 {
			return ""
		}
		return "\nbackground: " + string(b)
	}
	chunks := marker.Split(string(out), -1)
	marks := marker.FindAllStringSubmatch(string(out), -1)
	for j, want := range ex.want {
		if j >= len(marks) {
			t.Errorf("%s: `%s` did not run: an earlier command failed%s", name, ex.cmds[j], bgLog())
			return
		}
		stdout := lines(chunks[j])
		b, _ := os.ReadFile(filepath.Join(dir, "stderr."+strconv.Itoa(j)))
		stderr := lines(string(b))
		if status, _ := strconv.Atoi(marks[j][2]); status != 0 && !mayFail(want) {
			t.Errorf("%s: `%s` exited %d: %q %q%s", name, ex.cmds[j], status, stdout, stderr, bgLog())
			return
		}
		if len(want) > 0 && !matchOutput(want, stdout) && !matchOutput(want, stderr) && !matchOutput(want, append(stderr, stdout...)) {
			t.Errorf("%s: `%s` printed\n%s\nand on stderr\n%s\nthe document shows\n%s", name, ex.cmds[j],
				strings.Join(stdout, "\n"), strings.Join(stderr, "\n"), strings.Join(want, "\n"))
		}
	}
}

// The README's examples run as written, and print what it shows.
func TestREADMEExamples(t *testing.T) {
	onlyPair(t, "oci", "gvisor") // the README's commands name no engine
	root := pauseRoot(t)
	t.Cleanup(func() { examplesCleanup(t, root) })
	runExamples(t, root, "../README.md", nil)
}

// The manual's examples run as written, and print what it shows, but
// for blocks marked "<!-- not run: why -->".
func TestDocsExamples(t *testing.T) {
	onlyPair(t, "oci", "gvisor")
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil || len(docs) == 0 {
		t.Fatalf("no docs: %v", err)
	}
	for _, doc := range docs {
		b, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "\n$ ") {
			continue
		}
		t.Run(strings.TrimSuffix(filepath.Base(doc), ".md"), func(t *testing.T) {
			root := pauseRoot(t)
			t.Cleanup(func() { examplesCleanup(t, root) })
			runExamples(t, root, doc, prepare[filepath.Base(doc)])
		})
	}
}

// prepare makes the files a document's examples name that are too large
// for testdata, in each block's directory.
var prepare = map[string]func(t *testing.T, dir string){
	// An image of the reader's own, three ways: a busybox of the docs'
	// own (no other test's image, so removing it takes nothing shared).
	"images.md": func(t *testing.T, dir string) {
		if err := imagetest.BusyboxLayout(filepath.Join(dir, "my-image-oci"), "the images doc's own"); err != nil {
			t.Fatal(err)
		}
		rootfs := filepath.Join(dir, "rootfs", "bin")
		if err := os.MkdirAll(rootfs, 0o755); err != nil {
			t.Fatal(err)
		}
		script := `cp /bin/busybox rootfs/bin/ && ln -s busybox rootfs/bin/sh &&
			tar -cf my-image.tar -C my-image-oci . && tar -cf rootfs.tar -C rootfs .`
		if out, err := exec.Command("sh", "-c", "cd "+dir+" && "+script).CombinedOutput(); err != nil {
			t.Fatalf("making the images doc's files: %v: %s", err, out)
		}
	},
}

// examplesCleanup removes what the examples leave: the sandboxes they do
// not remove, their templates (with their snapshots), and the images
// they import.
func examplesCleanup(t *testing.T, root string) {
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
	var imgs []struct {
		Ref     string
		Default bool
	}
	if err := json.Unmarshal([]byte(in(root, "image", "ls", "--json").stdout), &imgs); err == nil {
		for _, img := range imgs {
			if !img.Default {
				in(root, "image", "rm", img.Ref)
			}
		}
	}
	if left := sandboxesIn(root); len(left) > 0 {
		t.Errorf("sandboxes left after the examples: %v", left)
	}
	out, err := exec.Command(filepath.Join(rootDir, "tools", "runsc"), "--root", filepath.Join(root, "oci", "runsc"), "list", "--quiet").Output()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("runsc containers left after the examples: %q (%v)", out, err)
	}
}

// docs/library.md's Go example compiles against the packages as they
// are: its block, with the two values it takes as given (ctx, file),
// goes into a function of a file the go command sees, through an
// overlay, inside this module.
func TestLibraryExample(t *testing.T) {
	onlyPair(t, "oci", "gvisor")
	b, err := os.ReadFile("../docs/library.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(b), "```go\n")
	block, _, ok2 := strings.Cut(rest, "```\n")
	if !ok || !ok2 {
		t.Fatal("docs/library.md has no Go block")
	}
	src := `package libraryexample

import (
	"context"
	"os"
	"time"

	"github.com/airlock-sandbox/airlock/engine/oci"
	"github.com/airlock-sandbox/airlock/isolation"
	"github.com/airlock-sandbox/airlock/runner"
)

var _ = time.Second

func example(ctx context.Context, file *os.File) {
` + block + `	_, _, _, _, _ = eng, res, tr, sb2, err
}
`
	dir := t.TempDir()
	file := filepath.Join(dir, "example.go")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	virtual, err := filepath.Abs("../internal/libraryexample/example.go")
	if err != nil {
		t.Fatal(err)
	}
	overlay, _ := json.Marshal(map[string]any{"Replace": map[string]string{virtual: file}})
	if err := os.WriteFile(filepath.Join(dir, "overlay.json"), overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "build", "-overlay", filepath.Join(dir, "overlay.json"), "../internal/libraryexample").CombinedOutput()
	if err != nil {
		t.Errorf("docs/library.md's example does not compile: %v\n%s\n%s", err, out, src)
	}
}
