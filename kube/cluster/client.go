package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/internal/termsafe"
)

// Client calls one API server as one user.
type Client struct {
	cfg     *Config
	hc      *http.Client
	timeout time.Duration
}

// RequestTimeout is how long one request may take by default, its answer
// read whole included (a pod exec's stream excepted): an API server that
// stalls inside an answer does not hold its caller for ever.
const RequestTimeout = 30 * time.Second

// Option configures a Client.
type Option func(*Client)

// WithRequestTimeout sets how long one request may take, its answer read
// whole included (RequestTimeout by default).
func WithRequestTimeout(d time.Duration) Option {
	return func(c *Client) {
		if d > 0 {
			c.timeout = d
		}
	}
}

// New returns a client for cfg. It follows no redirect: an API server
// answers, it does not send the client (and its credentials) elsewhere,
// so a 3xx is an error (see statusError), for a pod exec's WebSocket too.
func New(cfg *Config, opts ...Option) *Client {
	tr := &http.Transport{TLSClientConfig: cfg.TLS.Clone(), TLSHandshakeTimeout: 10 * time.Second, ResponseHeaderTimeout: 30 * time.Second}
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	c := &Client{cfg: cfg, hc: &http.Client{Transport: tr, CheckRedirect: noRedirect}, timeout: RequestTimeout}
	for _, o := range opts {
		o(c)
	}
	return c
}

// errTimedOut is the cause of a request's own deadline.
var errTimedOut = errors.New("the request's deadline passed")

// readAll reads r, the body of an answer asked for on ctx, up to max
// bytes. A read that ctx ended is an error, though the transport may
// end such a body with a plain EOF: what was read is not known whole.
func readAll(ctx context.Context, r io.Reader, max int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, max))
	if err == nil && ctx.Err() != nil {
		err = context.Cause(ctx)
	}
	return b, err
}

// bound returns ctx bounded by the client's request timeout.
func (c *Client) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(ctx, c.timeout, errTimedOut)
}

// failed is the error of request method path that failed with err while
// ctx, the request's (see bound), was live or not: a request that ran out
// of its own time says so, naming the server.
func (c *Client) failed(ctx context.Context, method, path string, err error) error {
	if errors.Is(context.Cause(ctx), errTimedOut) {
		return fmt.Errorf("%w: %s %s: the API server %s gave no whole answer within %v", errdefs.ErrUnavailable, method, path, c.cfg.Server, c.timeout)
	}
	return fmt.Errorf("%w: %s %s on %s: %v", errdefs.ErrUnavailable, method, path, c.cfg.Server, err)
}

// Config is the client's kubeconfig context.
func (c *Client) Config() *Config { return c.cfg }

// maxBody caps what the client reads of one response.
const maxBody = 8 << 20

// Status is the API server's error body (metav1.Status).
type Status struct {
	Status  string `json:"status"`
	Message string `json:"message"`
	Reason  string `json:"reason"`
	Code    int    `json:"code"`
	Details *struct {
		Causes []struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		} `json:"causes"`
	} `json:"details"`
}

// do sends a JSON request for path and decodes a 2xx answer, of at most
// maxBody bytes, into out (when non-nil); any other answer is an error
// classified by its status code.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	ctx, cancel := c.bound(ctx)
	defer cancel()
	resp, err := c.send(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := readAll(ctx, resp.Body, maxBody+1)
	if err != nil {
		return fmt.Errorf("reading the answer: %w", c.failed(ctx, method, path, err))
	}
	if len(b) > maxBody {
		return fmt.Errorf("%w: %s %s: the answer is over %d bytes", errdefs.ErrUnavailable, method, path, maxBody)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%w: %s %s: the answer is not the JSON expected: %v", errdefs.ErrUnavailable, method, path, err)
	}
	return nil
}

// send sends a request for path, with body as JSON when non-nil, and
// returns a 2xx answer for the caller to read and close; any other answer
// is an error classified by its status code. ctx should be bounded (see
// bound) until the answer is read.
func (c *Client) send(ctx context.Context, method, path string, query url.Values, body any) (*http.Response, error) {
	u := c.cfg.Server + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, fmt.Errorf("%w: encoding %s: %v", errdefs.ErrInternal, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errdefs.ErrInvalidArgument, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.auth(req.Header)
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.failed(ctx, method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
		if err != nil {
			return nil, fmt.Errorf("reading the answer: %w", c.failed(ctx, method, path, err))
		}
		return nil, statusError(resp.StatusCode, b)
	}
	return resp, nil
}

func (c *Client) auth(h http.Header) {
	if c.cfg.Token != "" {
		h.Set("Authorization", "Bearer "+c.cfg.Token)
	}
}

// statusError classifies an API server's refusal by its code, with its
// message (as Printable). A redirect is refused: the client follows none.
func statusError(code int, body []byte) error {
	if code/100 == 3 {
		return fmt.Errorf("%w: the API server answered %d %s, a redirect, which airlock does not follow: give the API server's own address in the kubeconfig",
			errdefs.ErrUnavailable, code, http.StatusText(code))
	}
	var st Status
	msg := string(body)
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		msg = st.Message
	}
	msg = Printable(msg)
	var kind error
	switch {
	case code == http.StatusNotFound:
		kind = errdefs.ErrNotFound
	case code == http.StatusConflict && st.Reason == "AlreadyExists":
		kind = errdefs.ErrAlreadyExists
	case code == http.StatusConflict:
		kind = errdefs.ErrConflict
	case code == http.StatusUnauthorized:
		kind = errdefs.ErrUnauthenticated
	case code == http.StatusForbidden:
		kind = errdefs.ErrPermissionDenied
	case code == http.StatusBadRequest || code == http.StatusUnprocessableEntity:
		kind = errdefs.ErrInvalidArgument
	case code == http.StatusTooManyRequests || code >= 500:
		kind = errdefs.ErrUnavailable
	default:
		kind = errdefs.ErrUnknown
	}
	return fmt.Errorf("%w: the API server answered %d: %s", kind, code, msg)
}

// MaxPrintable is how much of a text from the cluster Printable keeps.
const MaxPrintable = 512

// Printable returns s, a text from the cluster (an API server's message, a
// pod's or condition's status message: anyone who may write an object's
// status, a node included, chooses it), fit for an error or a progress
// line that a person reads: cut to MaxPrintable bytes at a character's
// start ("…" marks the cut), its control characters, bidirectional
// formatting and invalid UTF-8 escaped as package termsafe does.
func Printable(s string) string {
	cut := len(s) > MaxPrintable
	if cut {
		n := MaxPrintable
		for n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		s = s[:n]
	}
	var b strings.Builder
	w := termsafe.New(&b)
	w.Write([]byte(s))
	w.Flush()
	if cut {
		b.WriteString("…")
	}
	return b.String()
}

func isNotFound(err error) bool { return err != nil && errdefs.IsNotFound(err) }
