package mcpserver

import (
	"bytes"
	"fmt"
	"io"
	"net/http"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/wire"
)

// maxValues bounds the JSON values of one inbound message over HTTP: the
// SDK decodes a message whole, each value costing some 18 times its
// bytes (a message of empty strings, maxMessage long, would take about
// 400MiB), before a tool sees its arguments. The tools' longest lists
// (wire.MaxAllowHosts hosts, wire.MaxCredentials routes) fit many times.
const maxValues = 1 << 14

// boundValues refuses a POST whose body holds more than maxValues JSON
// values, before the SDK reads it; a body over maxMessage goes on as it
// is, for the SDK to refuse.
func boundValues(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		b, err := io.ReadAll(io.LimitReader(r.Body, maxMessage+1))
		if err != nil {
			writeError(w, fmt.Errorf("%w: reading the request's body: %v", errdefs.ErrInvalidArgument, err))
			return
		}
		if n := wire.Values(b); len(b) <= maxMessage && n > maxValues {
			writeError(w, fmt.Errorf("%w: the message holds %d JSON values, past the %d one message may hold: pass fewer entries (allow_host, credential) in one call, or fewer calls in one batch", errdefs.ErrInvalidArgument, n, maxValues))
			return
		}
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(b), r.Body), r.Body}
		next.ServeHTTP(w, r)
	})
}
