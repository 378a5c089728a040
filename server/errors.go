package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/engine"
	"github.com/airlock-sandbox/airlock/runner"
	"github.com/airlock-sandbox/airlock/units"
)

// Error kinds of the API and their HTTP statuses.
const (
	KindInvalidInput = "invalid_input"
	KindUnauthorized = "unauthorized"
	KindNotFound     = "not_found"
	KindOverLimit    = "over_limit"
	KindTimeout      = "timeout"
	KindUnavailable  = "unavailable"
	KindInternal     = "internal"
)

var statusOf = map[string]int{
	KindInvalidInput: http.StatusBadRequest,
	KindUnauthorized: http.StatusUnauthorized,
	KindNotFound:     http.StatusNotFound,
	KindOverLimit:    http.StatusTooManyRequests,
	KindTimeout:      http.StatusGatewayTimeout,
	KindUnavailable:  http.StatusServiceUnavailable,
	KindInternal:     http.StatusInternalServerError,
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

// kindOf classifies err for the API.
func kindOf(err error) string {
	var ae *apiError
	var mbe *http.MaxBytesError
	var te *runner.TransferError
	switch {
	case errors.As(err, &ae):
		return ae.kind
	case errors.As(err, &mbe):
		return KindOverLimit
	case errors.As(err, &te):
		if te.Reason == runner.ReasonNotFound {
			return KindNotFound
		}
		return KindInvalidInput
	case errors.Is(err, engine.ErrSandboxLost):
		return KindUnavailable
	case errdefs.IsInvalidArgument(err):
		return KindInvalidInput
	case errdefs.IsNotFound(err):
		return KindNotFound
	case errdefs.IsResourceExhausted(err):
		return KindOverLimit
	case errdefs.IsDeadlineExceeded(err), errors.Is(err, context.DeadlineExceeded):
		return KindTimeout
	case errdefs.IsUnavailable(err), errdefs.IsConflict(err):
		return KindUnavailable
	}
	return KindInternal
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
	writeJSON(w, statusOf[d.Kind], ErrorBody{Error: d})
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
