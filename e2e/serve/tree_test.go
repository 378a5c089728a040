//go:build e2e

package serve

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/server"
)

// treeCap is the server's peak RSS while trees and tar bombs stream.
const treeCap = 64 << 20

// putTree sends a tar stream to path and decodes the report.
func putTree(t *testing.T, a api, id, path string, body io.Reader) runner.TreeReport {
	t.Helper()
	st, _, b := a.do(t, "PUT", "/v1/sandboxes/"+id+"/files?path="+path, body, "Content-Type", server.TarType)
	var rep runner.TreeReport
	if st != http.StatusOK || json.Unmarshal(b, &rep) != nil {
		t.Fatalf("PUT tree %s: status %d: %.500s", path, st, b)
	}
	return rep
}

// getTree fetches the directory at path as tar: the files by name, the
// directories as "dir", and the report.
func getTree(t *testing.T, a api, id, path string) (map[string]string, runner.TreeReport) {
	t.Helper()
	st, h, b := a.do(t, "GET", "/v1/sandboxes/"+id+"/files?path="+path, nil, "Accept", server.TarType)
	if st != http.StatusOK || h.Get("Content-Type") != server.TarType {
		t.Fatalf("GET tree %s: status %d: %.500s", path, st, b)
	}
	got := map[string]string{}
	var rep runner.TreeReport
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		switch {
		case hdr.Name == server.ReportEntry:
			if err := json.Unmarshal(body, &rep); err != nil {
				t.Fatalf("the report: %v", err)
			}
		case hdr.Typeflag == tar.TypeDir:
			got[strings.TrimSuffix(hdr.Name, "/")] = "dir"
		default:
			got[hdr.Name] = string(body)
		}
	}
	return got, rep
}

func refusals(rep runner.TreeReport) map[string]string {
	m := map[string]string{}
	for _, tr := range rep.Transfers {
		if tr.Decision == runner.DecisionRefused {
			m[tr.Path] = string(tr.Reason)
		}
	}
	return m
}

// writeTar writes hdrs, each regular file with Size bytes of 'x'.
func writeTar(tw *tar.Writer, hdrs []*tar.Header) error {
	for _, h := range hdrs {
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			if _, err := io.Copy(tw, io.LimitReader(repeatX{}, h.Size)); err != nil {
				return err
			}
		}
	}
	return nil
}

type repeatX struct{}

func (repeatX) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = 'x'
	}
	return len(p), nil
}

// TestServeTrees: a tree of 1,000 files goes up and comes back as tar,
// byte-identical; hostile entries are each refused with their reason and
// nothing outside the target is touched; tar bombs stop at their caps
// while the server's memory stays small.
func TestServeTrees(t *testing.T) {
	s := startServer(t)
	a := s.apis()[0]
	si := a.create(t, map[string]any{"workspace_size": "32MiB", "tmp_size": "64MiB"})
	id := si.ID

	want := map[string]string{"empty": "dir"}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "empty/", Mode: 0o755})
	for i := range 1000 {
		dir := fmt.Sprintf("d%d/sub%d", i%10, i%7)
		if i%3 == 0 {
			dir = "données/日本語"
		}
		name := fmt.Sprintf("%s/f%04d é.txt", dir, i)
		body := bytes.Repeat(fmt.Appendf(nil, "line %d of file %d\n", i, i), 1000)[:10_000]
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(len(body)), Mode: 0o644})
		tw.Write(body)
		want[name] = string(body)
		parts := strings.Split(dir, "/")
		for j := range parts {
			want[strings.Join(parts[:j+1], "/")] = "dir"
		}
	}
	tw.Close()
	rep := putTree(t, a, id, "/home/user/proj", &buf)
	if rep.Summary.Files != 1000 || rep.Summary.Refused != 0 || len(rep.Transfers) != 1000 {
		t.Fatalf("upload: %+v", rep.Summary)
	}
	got, drep := getTree(t, a, id, "/home/user/proj")
	if drep.Summary.Files != 1000 || drep.Summary.Refused != 0 {
		t.Fatalf("download: %+v", drep.Summary)
	}
	if len(got) != len(want) {
		t.Errorf("%d entries came back, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s came back different", k)
		}
	}

	// Hostile entries, the file over the cap last: it stops the stream.
	buf.Reset()
	tw = tar.NewWriter(&buf)
	err := writeTar(tw, []*tar.Header{
		{Typeflag: tar.TypeReg, Name: "ok.txt", Size: 3},
		{Typeflag: tar.TypeSymlink, Name: "link", Linkname: "/etc"},
		{Typeflag: tar.TypeFifo, Name: "fifo"},
		{Typeflag: tar.TypeLink, Name: "hard", Linkname: "ok.txt"},
		{Typeflag: tar.TypeChar, Name: "null", Devmajor: 1, Devminor: 3},
		{Typeflag: tar.TypeReg, Name: "../escape.txt", Size: 3},
		{Typeflag: tar.TypeReg, Name: "/etc/abs.txt", Size: 3},
		{Typeflag: tar.TypeReg, Name: "sub/after.txt", Size: 3},
		{Typeflag: tar.TypeReg, Name: "big.bin", Size: 33 << 20},
	})
	if err != nil {
		t.Fatal(err)
	}
	tw.Close()
	rep = putTree(t, a, id, "/home/user/h", &buf)
	wantRefused := map[string]string{"/home/user/h/link": "symlink", "/home/user/h/fifo": "not_regular", "/home/user/h/hard": "hardlink",
		"/home/user/h/null": "not_regular", "/home/user/h/../escape.txt": "invalid_path", "/home/user/h//etc/abs.txt": "invalid_path",
		"/home/user/h/big.bin": "too_large"}
	if r := refusals(rep); fmt.Sprint(r) != fmt.Sprint(wantRefused) || rep.Summary.Files != 2 || rep.Summary.Stopped != "too_large" {
		t.Errorf("hostile upload: %+v, refused %v", rep.Summary, r)
	}
	res := a.exec(t, id, map[string]any{"argv": []string{"sh", "-c", "cd /home/user && find h | sort && ls -A /home/user /tmp && ls /etc/abs.txt /home/escape.txt 2>&1 | wc -l"}})
	if got, want := string(res.Stdout.Head), "h\nh/ok.txt\nh/sub\nh/sub/after.txt\n/home/user:\nh\nproj\n\n/tmp:\n2\n"; got != want {
		t.Errorf("after the hostile upload:\n%s\nwant\n%s", got, want)
	}

	// A tar bomb: a million empty entries, streamed, stopped at the count
	// cap; and one entry claiming 1TB, stopped at its header.
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		for i := range 1_000_000 {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("b/e%07d", i), Mode: 0o644}); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(tw.Close())
	}()
	rep = putTree(t, a, id, "/tmp/bomb", pr)
	pr.Close()
	if rep.Summary.Stopped != "too_many" || len(rep.Transfers) != runner.DefaultTreeFiles+1 {
		t.Errorf("a million entries: %+v, %d records", rep.Summary, len(rep.Transfers))
	}
	var tb bytes.Buffer
	tw = tar.NewWriter(&tb)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "tera.bin", Mode: 0o644, Size: 1 << 40})
	rep = putTree(t, a, id, "/home/user/tera", io.MultiReader(&tb, io.LimitReader(zeroes{}, 1<<20)))
	if rep.Summary.Stopped != "too_large" || len(rep.Transfers) != 1 || rep.Transfers[0].Reason != "too_large" {
		t.Errorf("a 1TB entry: %+v", rep)
	}
	peak := s.peakRSS(t)
	t.Logf("airlock serve's peak RSS: %.1f MiB", float64(peak)/(1<<20))
	if peak >= treeCap {
		t.Errorf("airlock serve's peak RSS is %.1f MiB, want under %d MiB", float64(peak)/(1<<20), treeCap>>20)
	}

	// Dot-named paths only when asked.
	a.exec(t, id, map[string]any{"argv": []string{"sh", "-c", "mkdir -p /home/user/dots/.git && echo cfg > /home/user/dots/.git/config && echo e > /home/user/dots/.env"}})
	got, drep = getTree(t, a, id, "/home/user/dots")
	if len(got) != 0 || fmt.Sprint(refusals(drep)) != fmt.Sprint(map[string]string{"/home/user/dots/.env": "hidden_name", "/home/user/dots/.git": "hidden_name"}) {
		t.Errorf("dotfiles by default: %v, %v", got, refusals(drep))
	}
	got, drep = getTree(t, a, id, "/home/user/dots&dotfiles=true")
	if got[".git/config"] != "cfg\n" || got[".env"] != "e\n" || drep.Summary.Refused != 0 {
		t.Errorf("?dotfiles=true: %v, %+v", got, drep.Summary)
	}

	// A directory refused before the stream begins is an error shape.
	for path, reason := range map[string]string{"/etc": "invalid_path", "/home/user/h/ok.txt": "", "/home/user/nope": ""} {
		st, _, b := a.do(t, "GET", "/v1/sandboxes/"+id+"/files?path="+path, nil, "Accept", server.TarType)
		var e apiError
		if st != http.StatusBadRequest || json.Unmarshal(b, &e) != nil || reason != "" && e.Error.Reason != reason {
			t.Errorf("GET tree %s: status %d: %s", path, st, b)
		}
	}
}

type zeroes struct{}

func (zeroes) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}
