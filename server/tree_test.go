package server

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
)

func TestIsTar(t *testing.T) {
	for v, want := range map[string]bool{
		"application/x-tar": true, "application/x-tar; charset=binary": true, "text/html, application/x-tar;q=0.9": true,
		"": false, "application/octet-stream": false, "application/x-tarx": false, "application/json": false,
	} {
		if got := isTar(v); got != want {
			t.Errorf("isTar(%q) = %v", v, got)
		}
	}
}

// The records spooled come back as one runner.TreeReport, in order.
func TestReportSpool(t *testing.T) {
	s, err := New(Options{Service: service.New(t.TempDir(), &fuzztest.NoEngines{})})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 3000} {
		rs, err := s.newReportSpool()
		if err != nil {
			t.Fatal(err)
		}
		rec := rs.record(s)
		for i := range n {
			tr := runner.Transfer{Direction: runner.DirectionUpload, Path: "/tmp/f" + string(rune('a'+i%26)), Decision: runner.DecisionAccepted}
			if i%2 == 1 {
				tr.Decision, tr.Reason, tr.Detail = runner.DecisionRefused, "symlink", "a \"symlink\",\nwith a newline"
			}
			rec(tr)
		}
		var out bytes.Buffer
		err = rs.report(&out, runner.TreeSummary{Files: n, Stopped: "too_many"})
		rs.Close()
		if err != nil {
			t.Fatalf("%d records: %v", n, err)
		}
		var rep runner.TreeReport
		if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
			t.Fatalf("%d records: %v: %s", n, err, out.String())
		}
		if len(rep.Transfers) != n || rep.Summary.Files != n || rep.Summary.Stopped != "too_many" {
			t.Fatalf("%d records: %+v", n, rep.Summary)
		}
		for i, tr := range rep.Transfers {
			if (i%2 == 1) != (tr.Decision == runner.DecisionRefused) {
				t.Fatalf("record %d out of order: %+v", i, tr)
			}
		}
	}
}

// sendTar streams what its fill writes, then the report of every record
// in order; a failure before the first byte is an error shape, one after
// it cuts the connection.
func TestSendTar(t *testing.T) {
	s, err := New(Options{Service: service.New(t.TempDir(), &fuzztest.NoEngines{})})
	if err != nil {
		t.Fatal(err)
	}
	fill := func(sink runner.TreeSink, each func(runner.Transfer)) (runner.TreeSummary, error) {
		for i, p := range []string{"/home/user/a.txt", "/etc/passwd", "/home/user/b.txt"} {
			tr := runner.Transfer{Direction: runner.DirectionDownload, Path: p, Decision: runner.DecisionAccepted, Size: 2}
			if i == 1 {
				tr = runner.Transfer{Direction: runner.DirectionDownload, Path: p, Decision: runner.DecisionRefused, Reason: runner.ReasonInvalidPath}
				each(tr)
				continue
			}
			f, err := sink.File(p[1:])
			if err != nil {
				return runner.TreeSummary{}, err
			}
			f.Write([]byte{'x', byte('0' + i)})
			if err := f.Commit(tr); err != nil {
				return runner.TreeSummary{}, err
			}
			each(tr)
		}
		return runner.TreeSummary{Files: 2, Refused: 1, Bytes: 4}, nil
	}
	rec := httptest.NewRecorder()
	s.sendTar(rec, fill)
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != TarType {
		t.Fatalf("status %d, %q", rec.Code, rec.Header().Get("Content-Type"))
	}
	tr := tar.NewReader(rec.Body)
	var names []string
	var rep runner.TreeReport
	hdr, err := tr.Next()
	for ; err == nil; hdr, err = tr.Next() {
		names = append(names, hdr.Name)
		if hdr.Name == ReportEntry && json.NewDecoder(tr).Decode(&rep) != nil {
			t.Fatal("the report is not JSON")
		}
	}
	if err != io.EOF {
		t.Fatal(err)
	}
	if want := []string{"home/user/a.txt", "home/user/b.txt", ReportEntry}; !slices.Equal(names, want) {
		t.Errorf("entries %q, want %q", names, want)
	}
	if len(rep.Transfers) != 3 || rep.Transfers[1].Reason != runner.ReasonInvalidPath || rep.Transfers[2].Path != "/home/user/b.txt" || rep.Summary.Files != 2 {
		t.Errorf("report %+v", rep)
	}

	// Refused before the stream: the error shape.
	rec = httptest.NewRecorder()
	s.sendTar(rec, func(runner.TreeSink, func(runner.Transfer)) (runner.TreeSummary, error) {
		return runner.TreeSummary{}, fmt.Errorf("%w: 1001 paths, past the cap of 1000 a request", errdefs.ErrInvalidArgument)
	})
	if e := errorOf(t, rec); e.Kind != KindInvalidInput || !strings.Contains(e.Message, "cap of 1000") {
		t.Errorf("got %+v", e)
	}

	// Failed once streaming: the connection is cut.
	defer func() {
		if r := recover(); r != http.ErrAbortHandler {
			t.Errorf("a failure mid-stream: recovered %v, want http.ErrAbortHandler", r)
		}
	}()
	s.sendTar(httptest.NewRecorder(), func(sink runner.TreeSink, each func(runner.Transfer)) (runner.TreeSummary, error) {
		f, _ := sink.File("home/user/a.txt")
		f.Write([]byte("ab"))
		f.Commit(runner.Transfer{Size: 2})
		return runner.TreeSummary{}, errdefs.ErrUnavailable
	})
}
