package artifacts

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// BenchmarkCopyOut compares Collect with `cp -r` of the same tree, in one
// run, so the ratio holds on a noisy machine. `make bench-artifacts` runs it.
func BenchmarkCopyOut(b *testing.B) {
	for _, tc := range []struct {
		name  string
		files int
		size  int
	}{
		{"1x100MB", 1, 100 << 20},
		{"1000x10KB", 1000, 10 << 10},
	} {
		src := benchSource(b)
		line := bytes.Repeat([]byte("airlock benchmark line of plain text\n"), tc.size/37+1)[:tc.size]
		for i := 0; i < tc.files; i++ {
			if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("f%04d.txt", i)), line, 0o644); err != nil {
				b.Fatal(err)
			}
		}
		total := int64(tc.files * tc.size)
		opt := Options{MaxFileBytes: int64(tc.size), MaxTotalBytes: total, MaxFiles: tc.files}
		run := func(b *testing.B, copyTree func(dest string)) {
			b.SetBytes(total)
			var elapsed time.Duration
			for i := 0; i < b.N; i++ {
				dest := filepath.Join(b.TempDir(), "dest")
				start := time.Now()
				copyTree(dest)
				elapsed += time.Since(start)
			}
			b.ReportMetric(float64(tc.files*b.N)/elapsed.Seconds(), "files/s")
		}
		b.Run("airlock/"+tc.name, func(b *testing.B) {
			run(b, func(dest string) {
				opt.Dest = dest
				rep, err := Collect(context.Background(), src, opt)
				if err != nil || len(rep.Artifacts) != tc.files {
					b.Fatalf("collect: %v, %d artifacts, rejected %+v", err, len(rep.Artifacts), rep.Rejected)
				}
			})
		})
		b.Run("cp-r/"+tc.name, func(b *testing.B) {
			run(b, func(dest string) {
				if out, err := exec.Command("cp", "-r", src, dest).CombinedOutput(); err != nil {
					b.Fatalf("cp: %v %s", err, out)
				}
			})
		})
	}
}

// benchSource is a tmpfs, like the output directory a run leaves, when
// the benchmark may mount one; else a temporary directory.
func benchSource(b *testing.B) string {
	dir := b.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, "size=256m"); err != nil {
		return dir
	}
	b.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}
