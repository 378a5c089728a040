package server

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/airlock-sandbox/airlock/errkind"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/units"
)

// The API's error kinds: errkind's table, whose rows give each its HTTP
// status.
const (
	KindInvalidInput = string(errkind.InvalidInput)
	KindUnauthorized = string(errkind.Unauthorized)
	KindNotFound     = string(errkind.NotFound)
	KindOverLimit    = string(errkind.OverLimit)
	KindTimeout      = string(errkind.Timeout)
	KindUnavailable  = string(errkind.Unavailable)
	KindInternal     = string(errkind.Internal)
)

// statusOf is kind's HTTP status.
func statusOf(kind string) int {
	if r, ok := errkind.Lookup(errkind.Kind(kind)); ok {
		return r.Status
	}
	return http.StatusInternalServerError
}

// ErrorBody is the one error shape of the API.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail is an error's kind, message and, for a refused transfer,
// its reason word.
type ErrorDetail struct {
	Kind    string `json:"kind"`
	Message string `json:"message"`
	Reason  string `json:"reason,omitempty"`
}

// apiError is an error the server itself raises, with its kind.
type apiError struct {
	kind string
	msg  string
}

func (e *apiError) Error() string { return e.msg }

func newError(kind, msg string) error { return &apiError{kind: kind, msg: msg} }

// kindOf classifies err for the API: the server's own errors and a body
// past its cap here, everything else by errkind's table.
func kindOf(err error) string {
	var ae *apiError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &ae):
		return ae.kind
	case errors.As(err, &mbe):
		return KindOverLimit
	}
	return string(errkind.Of(err))
}

func errorDetail(err error) ErrorDetail {
	d := ErrorDetail{Kind: kindOf(err), Message: err.Error()}
	if r := runner.ReasonOf(err); r != "" {
		d.Reason = string(r)
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		d.Message = "the request body is larger than the server accepts (" + units.Bytes(mbe.Limit).String() + "); send less, or raise airlock serve's --max-body"
	}
	return d
}

// writeError answers with the error shape and the kind's status.
func writeError(w http.ResponseWriter, err error) {
	d := errorDetail(err)
	if d.Kind == KindUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="airlock"`)
	}
	writeJSON(w, statusOf(d.Kind), ErrorBody{Error: d})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(ErrorBody{Error: ErrorDetail{Kind: KindInternal, Message: "encoding the response: " + err.Error()}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
