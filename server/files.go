package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/artifacts"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/service"
	"github.com/airlock-sandbox/airlock/units"
)

// transferTimeout bounds the time of one file transfer's body.
const transferTimeout = 10 * time.Minute

// fileTarget is the sandbox, the path and the upload limit a file
// request names.
// done releases the sandbox's runner once the transfer is over.
func (s *Server) fileTarget(r *http.Request) (f service.Files, path string, limit int64, done func(), err error) {
	p, err := targetPath(r)
	if err != nil {
		return nil, "", 0, nil, err
	}
	f, limit, done, err = s.svc.OpenFiles(r.Context(), r.PathValue("id"))
	return f, p, limit, done, err
}

func targetPath(r *http.Request) (string, error) {
	// Once: as of a key in a body, a proxy may read the first where
	// another reads the last.
	if ps := r.URL.Query()["path"]; len(ps) > 1 {
		return "", invalid("?path= given %d times; give the sandbox path once", len(ps))
	}
	p := r.URL.Query().Get("path")
	if p == "" {
		return "", invalid("give the sandbox path as ?path=, such as ?path=/home/user/data.csv")
	}
	return p, nil
}

// refused counts a refused transfer by its reason word.
func (s *Server) refused(err error) {
	if reason := runner.ReasonOf(err); reason != "" {
		s.metrics.rejected.Inc(string(reason))
	}
}

func (s *Server) putFile(w http.ResponseWriter, r *http.Request) {
	if isTar(r.Header.Get("Content-Type")) {
		s.putTree(w, r)
		return
	}
	sb, p, limit, done, err := s.fileTarget(r)
	if err != nil {
		writeError(w, err)
		return
	}
	defer done()
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(transferTimeout))
	// The runner counts the bytes as they stream and refuses past the
	// workspace's size (too_large); nothing is buffered here.
	tr, err := sb.Upload(r.Context(), p, r.Body, limit)
	if err != nil {
		s.refused(err)
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, tr)
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request) {
	if isTar(r.Header.Get("Accept")) {
		s.getTree(w, r)
		return
	}
	sb, p, _, done, err := s.fileTarget(r)
	if err != nil {
		writeError(w, err)
		return
	}
	defer done()
	// The file goes through the scanner into an unlinked file of the
	// server's first, so that a refusal can still be an error response.
	f, err := s.spool()
	if err != nil {
		writeError(w, err)
		return
	}
	defer f.Close()
	tr, err := sb.Download(r.Context(), p, f)
	if err != nil {
		s.refused(err)
		writeError(w, err)
		return
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		writeError(w, err)
		return
	}
	h := w.Header()
	h.Set("Content-Type", tr.MIME)
	h.Set("Content-Length", strconv.FormatInt(tr.Size, 10))
	h.Set("X-Airlock-Sha256", tr.SHA256)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Disposition", "attachment")
	w.WriteHeader(http.StatusOK)
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(transferTimeout))
	io.CopyN(w, f, tr.Size)
}

// fetched is what /run_code's fetch_files got: the files' contents, one
// after the other in an unlinked spool file, and the entries left out.
type fetched struct {
	spool   *spoolFile
	files   []fetchedFile
	omitted []FusionOmitted
}

// fetchedFile is one file of the spool: its fetch_files name, and where
// its bytes lie.
type fetchedFile struct {
	name      string
	off, size int64
}

func (f *fetched) close() {
	if f != nil && f.spool != nil {
		f.spool.Close()
	}
}

// fetchFiles reads the files names give from sb through the scanner into
// a spool, never into memory: each distinct path once, at most
// FetchMaxFiles of them and FetchMaxBytes in all. What is left out is
// named, with why.
func (s *Server) fetchFiles(ctx context.Context, sb *runner.Sandbox, names []string) (*fetched, error) {
	got := &fetched{}
	omit := func(name, reason, format string, args ...any) {
		got.omitted = append(got.omitted, FusionOmitted{Name: name, Reason: reason, Message: fmt.Sprintf(format, args...)})
	}
	seen := map[string]string{} // sandbox path → the first name of it
	var total int64
	for _, name := range names {
		p := path.Clean(fusionPath(name))
		if first, ok := seen[p]; ok {
			omit(name, reasonDuplicate, "names %s, as %q does before it; each file is fetched once", clip(p), clip(first))
			continue
		}
		seen[p] = name
		if len(got.files) == s.opt.FetchMaxFiles {
			omit(name, string(artifacts.ReasonTooMany), "one response carries at most %d files; fetch the rest in another run", s.opt.FetchMaxFiles)
			continue
		}
		if got.spool == nil {
			f, err := s.spool()
			if err != nil {
				got.close()
				return nil, err
			}
			got.spool = f
		}
		cw := &cappedWriter{w: got.spool, left: s.opt.FetchMaxBytes - total}
		_, err := sb.Download(ctx, p, cw)
		if cw.over || err != nil {
			// Whatever was written of it is dropped.
			if terr := got.spool.Truncate(total); terr != nil {
				got.close()
				return nil, terr
			}
			if _, serr := got.spool.Seek(total, io.SeekStart); serr != nil {
				got.close()
				return nil, serr
			}
		}
		switch {
		case cw.over:
			omit(name, string(artifacts.ReasonTooLarge), "the files fetched would pass %s, the most one response carries (%s are in); fetch it in another run, or write less",
				units.Bytes(s.opt.FetchMaxBytes), units.Bytes(total))
		case err != nil:
			s.refused(err)
			reason := string(runner.ReasonOf(err))
			if reason == "" {
				reason = reasonError
			}
			omit(name, reason, "%v", err)
		default:
			got.files = append(got.files, fetchedFile{name: name, off: total, size: cw.n})
			total += cw.n
		}
	}
	return got, nil
}

// cappedWriter passes at most left bytes to w, and fails past them.
type cappedWriter struct {
	w    io.Writer
	left int64
	n    int64
	over bool
}

var errOverCap = errors.New("past the fetch_files cap")

func (c *cappedWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left-c.n {
		c.over = true
		return 0, errOverCap
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// writeFusion writes resp with got's files as its files, streaming each
// from the spool through a base64 encoder: neither a file nor the
// response is ever whole in memory. The length is known beforehand.
// marshalPlain is json.Marshal without its HTML escaping, which writes
// '<', '>' and '&' in 6 bytes each: the answer is JSON, never HTML, and
// echoes names and output a client or a program chose.
func marshalPlain(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func writeFusion(w http.ResponseWriter, resp FusionResponse, got *fetched) error {
	var files []fetchedFile
	if got != nil {
		files = got.files
	}
	if resp.FilesOmitted == nil {
		resp.FilesOmitted = []FusionOmitted{}
	}
	head, err := marshalPlain(resp)
	if err != nil {
		return err
	}
	// files goes last: the head is resp's object, open.
	head = append(head[:len(head)-1], `,"files":`...)
	keys := make([][]byte, len(files))
	size := int64(len(head)) + int64(len("{}}\n"))
	for i, f := range files {
		if keys[i], err = marshalPlain(f.name); err != nil {
			return err
		}
		size += int64(len(keys[i])+len(`:""`)) + int64(base64.StdEncoding.EncodedLen(int(f.size)))
		if i > 0 {
			size++ // the comma
		}
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.Write(head)
	bw.WriteByte('{')
	for i, f := range files {
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.Write(keys[i])
		bw.WriteString(`:"`)
		enc := base64.NewEncoder(base64.StdEncoding, bw)
		if _, err := io.Copy(enc, io.NewSectionReader(got.spool, f.off, f.size)); err != nil {
			return fmt.Errorf("sending %q: %w", f.name, err)
		}
		enc.Close()
		bw.WriteByte('"')
	}
	bw.WriteString("}}\n")
	return bw.Flush()
}
