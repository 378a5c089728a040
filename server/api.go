package server

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/airlock-sandbox/airlock/kube/claim"
	"github.com/airlock-sandbox/airlock/runner"
)

// encode marshals a response body, or the error shape of its failure.
func encode(status int, v any) (int, []byte) {
	b, err := json.Marshal(v)
	if err != nil {
		return encodeError(err)
	}
	return status, append(b, '\n')
}

func encodeError(err error) (int, []byte) {
	d := errorDetail(err)
	b, _ := json.Marshal(ErrorBody{Error: d})
	return statusOf(d.Kind), append(b, '\n')
}

// idempotent answers with make's response, through the Idempotency-Key
// when the request carries one.
func (s *Server) idempotent(w http.ResponseWriter, r *http.Request, body []byte, persist bool, make func() (int, []byte)) {
	status, out := 0, []byte(nil)
	if key := r.Header.Get("Idempotency-Key"); key != "" {
		var replayed bool
		var err error
		status, out, replayed, err = s.idem.do(r.Pattern, key, body, persist, make)
		if err != nil {
			writeError(w, err)
			return
		}
		if replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
	} else {
		status, out = make()
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(out)
}

// admitted decodes the body into q, converts it, and answers with do's
// response, through the Idempotency-Key. Admission under MaxSandboxes is
// the service's, as do starts the work.
func (s *Server) admitted(w http.ResponseWriter, r *http.Request, persist bool, q any, convert func() error, do func() (int, []byte)) {
	body, err := readAllCapped(w, r, s.opt.MaxBody)
	if err != nil {
		writeError(w, err)
		return
	}
	s.idempotent(w, r, body, persist, func() (int, []byte) {
		if err := decodeJSON(bytes.NewReader(body), q); err != nil {
			return encodeError(err)
		}
		if err := convert(); err != nil {
			return encodeError(err)
		}
		return do()
	})
}

func (s *Server) postRun(w http.ResponseWriter, r *http.Request) {
	var q RunRequest
	var spec runner.Spec
	var eng string
	convert := func() (err error) { spec, eng, err = q.spec(s.svc); return err }
	s.admitted(w, r, false, &q, convert, func() (int, []byte) {
		s.inflight.Add(1)
		defer s.inflight.Done()
		begin := time.Now()
		res, err := s.svc.Run(r.Context(), eng, q.Template, spec)
		s.metrics.runDur.Observe(time.Since(begin).Seconds())
		if err != nil && res.ID == "" {
			return encodeError(err)
		}
		if err != nil {
			// As run --json: the run was made, and its Result says how it failed.
			res.Reason, res.Error, res.ErrorKind = runner.ReasonError, err.Error(), runner.ErrorKind(err)
		}
		s.metrics.result(res)
		return encode(http.StatusOK, res)
	})
}

func (s *Server) postSandbox(w http.ResponseWriter, r *http.Request) {
	var q SandboxRequest
	var spec runner.SandboxSpec
	var eng string
	convert := func() (err error) {
		if q.Engine == claim.Engine {
			return q.checkKube()
		}
		spec, eng, err = q.spec(s.svc)
		return err
	}
	s.admitted(w, r, true, &q, convert, func() (int, []byte) {
		if q.Engine == claim.Engine {
			return s.createKube(r.Context(), &q)
		}
		begin := time.Now()
		// A client that hangs up does not undo the create: its retry, with
		// the same Idempotency-Key, gets this sandbox.
		sb, err := s.svc.Create(context.WithoutCancel(r.Context()), eng, q.Template, spec)
		if err != nil {
			return encodeError(err)
		}
		s.metrics.createDur.Observe(time.Since(begin).Seconds())
		return encode(http.StatusCreated, sb.Info().Public())
	})
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request) {
	list, err := s.svc.Sandboxes()
	if err != nil {
		writeError(w, err)
		return
	}
	for i := range list {
		list[i] = list[i].Public()
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request) {
	si, err := s.svc.Sandbox(r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, si.Public())
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := runner.CheckSandboxID(id); err != nil {
		writeError(w, err)
		return
	}
	if err := s.svc.Destroy(context.WithoutCancel(r.Context()), id); err != nil {
		s.metrics.termFail.Add(1)
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request) {
	s.pauseOrResume(w, r, s.svc.Pause)
}

func (s *Server) resumeSandbox(w http.ResponseWriter, r *http.Request) {
	s.pauseOrResume(w, r, s.svc.Resume)
}

// pauseOrResume runs a pause or a resume to its end whatever the client
// does: a checkpoint or a restore cut short is left half-way.
func (s *Server) pauseOrResume(w http.ResponseWriter, r *http.Request, do func(context.Context, string) (runner.SandboxInfo, error)) {
	id := r.PathValue("id")
	if err := runner.CheckSandboxID(id); err != nil {
		writeError(w, err)
		return
	}
	si, err := do(context.WithoutCancel(r.Context()), id)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, si.Public())
}
