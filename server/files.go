package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/runner"
)

// transferTimeout bounds the time of one file transfer's body.
const transferTimeout = 10 * time.Minute

// fileTarget is the sandbox and the path a file request names.
func (s *Server) fileTarget(r *http.Request) (*runner.Sandbox, string, error) {
	p := r.URL.Query().Get("path")
	if p == "" {
		return nil, "", invalid("give the sandbox path as ?path=, such as ?path=/home/user/data.csv")
	}
	sb, err := s.open(r.Context(), r.PathValue("id"))
	return sb, p, err
}

// refused counts a refused transfer by its reason word.
func (s *Server) refused(err error) {
	if reason := runner.ReasonOf(err); reason != "" {
		s.metrics.rejected.Inc(string(reason))
	}
}

func (s *Server) putFile(w http.ResponseWriter, r *http.Request) {
	sb, p, err := s.fileTarget(r)
	if err != nil {
		writeError(w, err)
		return
	}
	http.NewResponseController(w).SetReadDeadline(time.Now().Add(transferTimeout))
	// The runner counts the bytes as they stream and refuses past the
	// workspace's size (too_large); nothing is buffered here.
	tr, err := sb.Upload(r.Context(), p, r.Body, sb.Info().WorkspaceBytes)
	if err != nil {
		s.refused(err)
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, tr)
}

func (s *Server) getFile(w http.ResponseWriter, r *http.Request) {
	sb, p, err := s.fileTarget(r)
	if err != nil {
		writeError(w, err)
		return
	}
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

// spool returns a new unlinked file under <root>/server/spool.
func (s *Server) spool() (*os.File, error) {
	dir := filepath.Join(s.opt.Root, "server", "spool")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	f, err := os.CreateTemp(dir, "dl-*")
	if err != nil {
		return nil, err
	}
	os.Remove(f.Name())
	return f, nil
}

// download reads path from sb through the scanner into memory, for
// /run_code's fetch_files.
func download(ctx context.Context, sb *runner.Sandbox, p string) ([]byte, error) {
	// The scanner caps the size (the sandbox's workspace size).
	var buf bytes.Buffer
	_, err := sb.Download(ctx, p, &buf)
	return buf.Bytes(), err
}
