package server

import (
	"bufio"
	"encoding/json"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/runner"
)

// A tree moves through the files route as a tar stream: PUT with
// Content-Type: application/x-tar extracts one beneath ?path=, GET with
// Accept: application/x-tar sends the directory at ?path= as one, and
// POST …/files/read sends a list of files as one. The runner judges each
// entry as it streams (runner.Areas.UploadTree, DownloadTree and
// DownloadFiles); the server holds one entry at a time and spools the
// per-entry records to an unlinked file of its own, so neither a large
// tree nor a tar bomb grows its memory.

// TarType is the media type of a tree.
const TarType = "application/x-tar"

// ReportEntry names the last entry of a downloaded tree: the
// runner.TreeReport of the transfer. No file of a sandbox has this name:
// names starting with ".airlock-" are never delivered.
const ReportEntry = ".airlock-report.json"

// isTar says whether a header value names the tar media type.
func isTar(v string) bool {
	for part := range strings.SplitSeq(v, ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == TarType {
			return true
		}
	}
	return false
}

// reportSpool keeps a tree transfer's records, one JSON line each, in an
// unlinked file, and writes them back as a runner.TreeReport.
type reportSpool struct {
	f   *spoolFile
	bw  *bufio.Writer
	enc *json.Encoder
	err error
}

func (s *Server) newReportSpool() (*reportSpool, error) {
	f, err := s.spool()
	if err != nil {
		return nil, err
	}
	bw := bufio.NewWriter(f)
	return &reportSpool{f: f, bw: bw, enc: json.NewEncoder(bw)}, nil
}

func (rs *reportSpool) Close() error { return rs.f.Close() }

// record keeps tr and counts a refusal by its reason word.
func (rs *reportSpool) record(s *Server) func(runner.Transfer) {
	return func(tr runner.Transfer) {
		if tr.Decision == runner.DecisionRefused && tr.Reason != "" {
			s.metrics.rejected.Inc(string(tr.Reason))
		}
		if rs.err == nil {
			rs.err = rs.enc.Encode(tr)
		}
	}
}

// report writes {"transfers": [the records], "summary": sum} to w.
func (rs *reportSpool) report(w io.Writer, sum runner.TreeSummary) error {
	if rs.err == nil {
		rs.err = rs.bw.Flush()
	}
	if rs.err != nil {
		return rs.err
	}
	if _, err := rs.f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	bw := bufio.NewWriter(w)
	bw.WriteString(`{"transfers":[`)
	br := bufio.NewReader(rs.f)
	for first := true; ; first = false {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			if !first {
				bw.WriteByte(',')
			}
			bw.Write(line[:len(line)-1])
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	b, _ := json.Marshal(sum)
	bw.WriteString(`],"summary":`)
	bw.Write(b)
	bw.WriteString("}\n")
	return bw.Flush()
}

// putTree extracts the tar stream in the body beneath ?path=. It answers
// 200 with the runner.TreeReport once the stream is read, a cap that
// stopped it included (summary.stopped); an error shape when the target
// is refused or the stream is not tar.
func (s *Server) putTree(w http.ResponseWriter, r *http.Request) {
	sb, p, _, done, err := s.fileTarget(r)
	if err != nil {
		writeError(w, err)
		return
	}
	defer done()
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(transferTimeout))
	rs, err := s.newReportSpool()
	if err != nil {
		writeError(w, err)
		return
	}
	defer rs.Close()
	sum, err := sb.UploadTree(r.Context(), p, r.Body, rs.record(s))
	if err != nil && sum.Stopped == "" {
		s.refused(err)
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	rs.report(w, sum)
}

// getTree sends the directory at ?path= as a tar stream of the files the
// scanner passes, ending with ReportEntry. A refused directory is an
// error shape.
func (s *Server) getTree(w http.ResponseWriter, r *http.Request) {
	sb, p, _, done, err := s.fileTarget(r)
	if err != nil {
		writeError(w, err)
		return
	}
	defer done()
	dotfiles := false
	if vs := r.URL.Query()["dotfiles"]; len(vs) > 1 {
		writeError(w, invalid("?dotfiles= given %d times; give it once", len(vs)))
		return
	}
	if v := r.URL.Query().Get("dotfiles"); v != "" {
		if dotfiles, err = strconv.ParseBool(v); err != nil {
			writeError(w, invalid("?dotfiles= takes true or false, not %q", v))
			return
		}
	}
	if isDir, err := sb.IsDir(p); err != nil || !isDir {
		if err == nil {
			err = invalid("%s is not a directory: download one file without Accept: %s", p, TarType)
		}
		s.refused(err)
		writeError(w, err)
		return
	}
	s.sendTar(w, func(sink runner.TreeSink, each func(runner.Transfer)) (runner.TreeSummary, error) {
		return sb.DownloadTree(r.Context(), p, sink, dotfiles, each)
	})
}

// readFiles sends the files a ReadFilesRequest names as a tar stream of
// those the scanner passes, in the request's order, named by their
// absolute paths without the leading '/', and ends it with ReportEntry:
// one record a path, in order. Too many paths is an error shape.
func (s *Server) readFiles(w http.ResponseWriter, r *http.Request) {
	var req ReadFilesRequest
	if err := s.body(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	sb, _, done, err := s.svc.OpenFiles(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	defer done()
	s.sendTar(w, func(sink runner.TreeSink, each func(runner.Transfer)) (runner.TreeSummary, error) {
		return sb.DownloadFiles(r.Context(), req.Paths, sink, each)
	})
}

// sendTar answers with the tar stream that fill writes into its sink,
// then ReportEntry. An error before the stream's first byte is an error
// shape; one after it cuts the connection, so that a client never takes
// a cut stream for a whole one.
func (s *Server) sendTar(w http.ResponseWriter, fill func(runner.TreeSink, func(runner.Transfer)) (runner.TreeSummary, error)) {
	files, err := s.spool()
	if err != nil {
		writeError(w, err)
		return
	}
	defer files.Close()
	rs, err := s.newReportSpool()
	if err != nil {
		writeError(w, err)
		return
	}
	defer rs.Close()
	lw := &lazyWriter{w: w, start: func() {
		h := w.Header()
		h.Set("Content-Type", TarType)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Content-Disposition", "attachment")
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).SetWriteDeadline(time.Now().Add(transferTimeout))
	}}
	sink := runner.NewTarSink(lw, files)
	sum, err := fill(sink, rs.record(s))
	if err != nil && sum.Stopped == "" {
		if !lw.started {
			s.refused(err)
			writeError(w, err)
			return
		}
		panic(http.ErrAbortHandler)
	}
	// The report goes through the files' spool, now free, to be sized.
	if _, err := files.Seek(0, io.SeekStart); err == nil {
		err = files.Truncate(0)
	}
	var n int64
	err = rs.report(files, sum)
	if err == nil {
		n, err = files.Seek(0, io.SeekCurrent)
	}
	if err == nil {
		_, err = files.Seek(0, io.SeekStart)
	}
	if err == nil {
		err = sink.Add(ReportEntry, n, files)
	}
	if err == nil {
		err = sink.Close()
	}
	if err != nil {
		if !lw.started {
			writeError(w, err)
			return
		}
		panic(http.ErrAbortHandler)
	}
}

// lazyWriter calls start before its first write, so that a handler can
// still answer with an error until the first byte of a stream.
type lazyWriter struct {
	w       io.Writer
	start   func()
	started bool
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if !l.started {
		l.started = true
		l.start()
	}
	return l.w.Write(p)
}
