package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// growSink counts what it is given and, at each file's first write
// (after the host's fstat, the head read), extends the file it copies,
// as a sandbox can with ftruncate: every file grows while read.
type growSink struct {
	t    *testing.T
	src  func(rel string) string
	n    int64
	grew int
}

func (s *growSink) Dir(string) error { return nil }

func (s *growSink) File(rel string) (TreeFile, error) {
	return &growFile{s: s, path: s.src(rel)}, nil
}

type growFile struct {
	s     *growSink
	path  string
	grown bool
}

func (f *growFile) Write(p []byte) (int, error) {
	if !f.grown {
		f.grown = true
		if err := os.Truncate(f.path, 1<<20); err != nil {
			f.s.t.Error(err)
		}
		f.s.grew++
	}
	f.s.n += int64(len(p))
	return len(p), nil
}

func (f *growFile) Commit(Transfer) error { return nil }
func (f *growFile) Discard()              {}

// Files that grow while read are refused past the file cap, but what
// they gave the sink counts toward the transfer's byte cap: the sink gets
// about that cap, not a file cap per file. Past it a tree stops; a list
// of paths refuses the rest unread, one record a path still.
func TestDownloadGrowingFiles(t *testing.T) {
	a := newAreas(t, AreasSpec{})
	const n = 24
	lim := TreeLimits{Files: 100, Bytes: 5000, FileBytes: 1000}
	dir := filepath.Join(a.Workspace, "g")
	os.MkdirAll(dir, 0o755)
	var paths []string
	for i := range n {
		paths = append(paths, fmt.Sprintf("g/g%02d.txt", i))
	}
	for _, c := range []struct {
		name  string
		stops bool
		src   func(rel string) string
		run   func(TreeSink, func(Transfer)) (TreeSummary, error)
	}{
		{"tree", true, func(rel string) string { return filepath.Join(dir, rel) },
			func(sink TreeSink, each func(Transfer)) (TreeSummary, error) {
				return a.DownloadTree(context.Background(), "/home/user/g", sink, SessionDownload(1<<30), lim, each)
			}},
		{"files", false, func(rel string) string { return filepath.Join(a.Workspace, strings.TrimPrefix(rel, "home/user/")) },
			func(sink TreeSink, each func(Transfer)) (TreeSummary, error) {
				return a.DownloadFiles(context.Background(), paths, sink, SessionDownload(1<<30), lim, each)
			}},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, p := range paths {
				os.WriteFile(filepath.Join(a.Workspace, p), []byte("line\n"), 0o644)
			}
			sink := &growSink{t: t, src: c.src}
			d := &decisions{}
			sum, err := c.run(sink, d.add)
			t.Logf("%d files read, %d bytes to the sink: %v", sink.grew, sink.n, err)
			if sink.n > lim.Bytes+lim.FileBytes {
				t.Errorf("the sink got %d bytes from %d grown files, past the %d-byte cap and a file cap", sink.n, sink.grew, lim.Bytes)
			}
			if sink.grew < 2 || sink.grew >= n {
				t.Fatalf("%d of %d files grew while read", sink.grew, n)
			}
			if sum.Files != 0 || sum.Refused != len(d.all) {
				t.Errorf("summary %+v, %d records", sum, len(d.all))
			}
			for _, tr := range d.all {
				if tr.Reason != ReasonTooLarge {
					t.Errorf("%s: %s %s", tr.Path, tr.Reason, tr.Detail)
				}
			}
			// The first file not read is refused naming the cap: the stop,
			// or the first of the paths refused unread.
			if cut := d.all[sink.grew]; !strings.Contains(cut.Detail, "5000-byte cap") {
				t.Errorf("the first file not read: %+v", cut)
			}
			if c.stops {
				if ReasonOf(err) != ReasonTooLarge || sum.Stopped != ReasonTooLarge || !strings.Contains(err.Error(), "5000-byte cap") || len(d.all) != sink.grew+1 {
					t.Errorf("not stopped at the byte cap: %v, %+v, %d records", err, sum, len(d.all))
				}
			} else if err != nil || sum.Stopped != "" || len(d.all) != n {
				t.Errorf("%v, %+v, %d records for %d paths", err, sum, len(d.all), n)
			}
		})
	}
}
