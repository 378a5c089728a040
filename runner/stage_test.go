package runner

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// stageFor stages inputs into a fresh run directory under root and returns
// the scratch and the error; the run directory is removed at the end.
func stageFor(t *testing.T, root string, inputs []Input, limit int64) (*scratch, error) {
	t.Helper()
	sc := &scratch{dir: filepath.Join(root, "runs", "r")}
	if err := os.MkdirAll(sc.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.cleanup() })
	err := sc.stageInputs(context.Background(), root, inputs, limit, time.Time{})
	return sc, err
}

// stagedContains reports whether any file staged under dir holds needle.
func stagedContains(t *testing.T, dir string, needle []byte) bool {
	t.Helper()
	found := false
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, needle) {
				found = true
			}
		}
		return nil
	})
	return found
}

// An input tree whose owner keeps swapping a subdirectory with a symlink to
// a directory outside the tree must never get anything from outside staged.
func TestStageInputsSwapRace(t *testing.T) {
	base := t.TempDir()
	secret := []byte("SECRET-outside-the-tree")
	outside := filepath.Join(base, "outside")
	tree := filepath.Join(base, "tree")
	for _, d := range []string{outside, filepath.Join(tree, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(outside, "shadow"), secret, 0o644)
	for i := range 20 {
		os.WriteFile(filepath.Join(tree, "sub", "f"+string(rune('a'+i))), []byte("inside"), 0o644)
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
			if err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE); err == nil {
				swaps.Add(1)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	root := filepath.Join(base, "root")
	refused := 0
	for i := range 60 {
		sc, err := stageFor(t, filepath.Join(root, string(rune('a'+i%26))+string(rune('a'+i/26))), []Input{{Host: tree, Sandbox: "/work/tree"}}, 1<<20)
		if stagedContains(t, sc.dir, secret) {
			t.Fatalf("try %d: a file from outside the input tree was staged", i)
		}
		for _, f := range sc.inputs {
			if filepath.Base(f.Path) == "shadow" {
				t.Fatalf("try %d: the receipt lists %q, from outside the tree", i, f.Path)
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, errChanged):
			refused++
		default:
			t.Fatalf("try %d: %v, want success or a changed-while-copied refusal", i, err)
		}
		sc.cleanup()
	}
	if swaps.Load() == 0 {
		t.Fatal("the swapper never swapped")
	}
	t.Logf("%d swaps, %d of 60 stagings refused as changed", swaps.Load(), refused)
}

// A FIFO swapped in for a file, with a writer feeding it forever, is
// refused quickly: staging never reads it to EOF.
func TestStageInputsRefusesSwappedFIFO(t *testing.T) {
	base := t.TempDir()
	tree := filepath.Join(base, "tree")
	os.MkdirAll(tree, 0o755)
	file, fifo := filepath.Join(tree, "data"), filepath.Join(tree, "pipe")
	os.WriteFile(file, []byte("small"), 0o644)
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	// A writer on the FIFO that never stops.
	w, err := os.OpenFile(fifo, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		chunk := bytes.Repeat([]byte("x"), 64<<10)
		for {
			select {
			case <-stop:
				return
			default:
			}
			w.Write(chunk)
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			unix.Renameat2(unix.AT_FDCWD, file, unix.AT_FDCWD, fifo, unix.RENAME_EXCHANGE)
		}
	}()
	defer func() { close(stop); w.Close(); wg.Wait() }()

	const limit = 1 << 20
	for i := range 50 {
		type out struct {
			sc  *scratch
			err error
		}
		ch := make(chan out, 1)
		go func() {
			sc, err := stageFor(t, filepath.Join(base, "root", string(rune('a'+i%26))+string(rune('a'+i/26))), []Input{{Host: tree, Sandbox: "/work/tree"}}, limit)
			ch <- out{sc, err}
		}()
		select {
		case o := <-ch:
			if o.err != nil && !errors.Is(o.err, errChanged) {
				t.Fatalf("try %d: %v, want success or a changed-while-copied refusal", i, o.err)
			}
			var n int64
			filepath.WalkDir(o.sc.dir, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() {
					if fi, err := d.Info(); err == nil {
						n += fi.Size()
					}
				}
				return nil
			})
			if n > limit {
				t.Fatalf("try %d: %d bytes staged, over the %d-byte limit", i, n, limit)
			}
			for _, f := range o.sc.inputs {
				if f.Size != int64(len("small")) {
					t.Fatalf("try %d: staged %+v, not the small file", i, f)
				}
			}
			o.sc.cleanup()
		case <-time.After(10 * time.Second):
			t.Fatalf("try %d: staging with a FIFO fed forever did not end within 10s", i)
		}
	}
}
