package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/containerd/errdefs"
)

// Client calls one API server as one user.
type Client struct {
	cfg *Config
	hc  *http.Client
}

// New returns a client for cfg.
func New(cfg *Config) *Client {
	tr := &http.Transport{TLSClientConfig: cfg.TLS.Clone(), TLSHandshakeTimeout: 10 * time.Second, ResponseHeaderTimeout: 30 * time.Second}
	return &Client{cfg: cfg, hc: &http.Client{Transport: tr}}
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

// do sends a JSON request for path and decodes a 2xx answer into out (when
// non-nil); any other answer is an error classified by its status code.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any) error {
	u := c.cfg.Server + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%w: encoding %s: %v", errdefs.ErrInternal, path, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("%w: %v", errdefs.ErrInvalidArgument, err)
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.auth(req.Header)
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s %s: %v", errdefs.ErrUnavailable, method, c.cfg.Server, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return fmt.Errorf("%w: reading %s %s: %v", errdefs.ErrUnavailable, method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return statusError(resp.StatusCode, b)
	}
	if out == nil {
		return nil
	}
	if raw, ok := out.(*rawBody); ok {
		*raw = b
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%w: %s %s: the answer is not the JSON expected: %v", errdefs.ErrUnavailable, method, path, err)
	}
	return nil
}

// rawBody takes a response that is not JSON (a log) as it is.
type rawBody []byte

func (c *Client) auth(h http.Header) {
	if c.cfg.Token != "" {
		h.Set("Authorization", "Bearer "+c.cfg.Token)
	}
}

// statusError classifies an API server's refusal by its code, with its
// message.
func statusError(code int, body []byte) error {
	var st Status
	msg := string(body)
	if json.Unmarshal(body, &st) == nil && st.Message != "" {
		msg = st.Message
	}
	if len(msg) > 512 {
		msg = msg[:512] + "…"
	}
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

func isNotFound(err error) bool { return err != nil && errdefs.IsNotFound(err) }
