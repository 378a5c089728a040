package cluster

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/coder/websocket"
	"github.com/containerd/errdefs"
)

// Protocol is the pod exec stream protocol the client speaks: each binary
// message is a channel byte and its payload; v5 adds the close signal,
// which ends the program's stdin.
const Protocol = "v5.channel.k8s.io"

// The protocol's channels.
const (
	ChannelStdin  = 0
	ChannelStdout = 1
	ChannelStderr = 2
	// ChannelError carries one Status as JSON: Success, or Failure with
	// reason NonZeroExitCode and the code as the cause ExitCode.
	ChannelError = 3
	// ChannelResize takes a terminal's size; airlock asks for none.
	ChannelResize = 4
	// ChannelClose, followed by a channel byte, closes that channel.
	ChannelClose = 255
)

// Exec is one program run in a pod's container.
type Exec struct {
	Namespace, Pod, Container string
	// Argv is the program and its arguments, run without a shell.
	Argv []string
	// Stdin feeds the program and is closed at its EOF; nil means the
	// program has no stdin. Exec reads it no more once the program has
	// ended, and returns only once a Read in progress then has returned
	// (as os/exec's Wait does), so the caller has its reader back,
	// positioned after what was read: a Stdin that may block for long (a
	// terminal) holds Exec's return that long.
	Stdin io.Reader
	// Stdout and Stderr receive the output as it arrives; nil discards.
	Stdout, Stderr io.Writer
}

// ref is e's pod for an error, as Printable: its name may be the
// cluster's word.
func (e Exec) ref() string { return Printable(e.Namespace + "/" + e.Pod) }

// maxFrame caps one message from the API server.
const maxFrame = 1 << 20

// Exec runs e through the API server's pod exec and returns the program's
// exit code. An error means the exec did not run, or its end is unknown
// (the stream broke before its status).
func (c *Client) Exec(ctx context.Context, e Exec) (int, error) {
	if len(e.Argv) == 0 {
		return -1, fmt.Errorf("%w: exec in pod %s: no command", errdefs.ErrInvalidArgument, e.ref())
	}
	q := url.Values{"command": e.Argv, "stdout": {"true"}, "stderr": {"true"}}
	if e.Container != "" {
		q.Set("container", e.Container)
	}
	if e.Stdin != nil {
		q.Set("stdin", "true")
	}
	u := c.cfg.Server + "/api/v1/namespaces/" + url.PathEscape(e.Namespace) + "/pods/" + url.PathEscape(e.Pod) + "/exec?" + q.Encode()
	h := http.Header{}
	c.auth(h)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	conn, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: h, Subprotocols: []string{Protocol}})
	if err != nil {
		if resp != nil && resp.StatusCode/100 != 2 && resp.StatusCode != http.StatusSwitchingProtocols {
			var b []byte
			if resp.Body != nil {
				b, _ = io.ReadAll(io.LimitReader(resp.Body, maxBody))
			}
			return -1, fmt.Errorf("exec in pod %s: %w", e.ref(), statusError(resp.StatusCode, b))
		}
		return -1, fmt.Errorf("%w: exec in pod %s: %v", errdefs.ErrUnavailable, e.ref(), err)
	}
	defer conn.CloseNow()
	if p := conn.Subprotocol(); p != Protocol {
		return -1, fmt.Errorf("%w: exec in pod %s: the API server speaks %q, not %s (it needs Kubernetes 1.30 or later)", errdefs.ErrNotImplemented, e.ref(), p, Protocol)
	}
	conn.SetReadLimit(maxFrame)
	if e.Stdin == nil {
		return readStreams(ctx, conn, e)
	}
	// The program may end without reading its stdin (a transfer script
	// that refuses its path): the copy then stops, and Exec waits for it,
	// so that e.Stdin is never read after Exec returns.
	sctx, stop := context.WithCancel(ctx)
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sendStdin(sctx, conn, e.Stdin)
	}()
	code, err := readStreams(ctx, conn, e)
	stop()
	<-copied
	return code, err
}

// sendStdin copies r to the stdin channel, then closes the channel; it
// starts no Read once ctx is done.
func sendStdin(ctx context.Context, conn *websocket.Conn, r io.Reader) {
	buf := make([]byte, 32<<10)
	for ctx.Err() == nil {
		n, err := r.Read(buf[1:])
		if ctx.Err() != nil {
			return
		}
		if n > 0 {
			buf[0] = ChannelStdin
			if conn.Write(ctx, websocket.MessageBinary, buf[:1+n]) != nil {
				return
			}
		}
		if err != nil {
			// EOF or a failed read: either way the program's stdin ends.
			conn.Write(ctx, websocket.MessageBinary, []byte{ChannelClose, ChannelStdin})
			return
		}
	}
}

// readStreams delivers the output channels until the stream ends, and
// returns the exit code from the status channel.
func readStreams(ctx context.Context, conn *websocket.Conn, e Exec) (int, error) {
	var status []byte
	for {
		typ, msg, err := conn.Read(ctx)
		if err != nil {
			if websocket.CloseStatus(err) == websocket.StatusNormalClosure || errors.Is(err, io.EOF) || status != nil {
				break
			}
			return -1, fmt.Errorf("%w: exec in pod %s: the stream broke before the program's end was known: %v", errdefs.ErrUnavailable, e.ref(), err)
		}
		if typ != websocket.MessageBinary || len(msg) == 0 {
			continue
		}
		var w io.Writer
		switch msg[0] {
		case ChannelStdout:
			w = e.Stdout
		case ChannelStderr:
			w = e.Stderr
		case ChannelError:
			if len(status)+len(msg) > maxBody {
				return -1, fmt.Errorf("%w: exec in pod %s: an oversized status", errdefs.ErrUnavailable, e.ref())
			}
			status = append(status, msg[1:]...)
		}
		if w != nil && len(msg) > 1 {
			if _, err := w.Write(msg[1:]); err != nil {
				return -1, fmt.Errorf("exec in pod %s: writing its output: %w", e.ref(), err)
			}
		}
	}
	if status == nil {
		return -1, fmt.Errorf("%w: exec in pod %s: the stream ended without the program's status", errdefs.ErrUnavailable, e.ref())
	}
	return ExitCode(status)
}

// ExitCode reads the status channel's Status: Success is 0, a
// NonZeroExitCode failure its code; any other failure is an error (the
// program did not run, or ran without a known end).
func ExitCode(status []byte) (int, error) {
	var st Status
	if err := json.Unmarshal(status, &st); err != nil {
		return -1, fmt.Errorf("%w: the exec's status is not JSON: %v", errdefs.ErrUnavailable, err)
	}
	if st.Status == "Success" {
		return 0, nil
	}
	if st.Reason == "NonZeroExitCode" && st.Details != nil {
		for _, c := range st.Details.Causes {
			if c.Reason == "ExitCode" {
				if n, err := strconv.Atoi(strings.TrimSpace(c.Message)); err == nil {
					return n, nil
				}
			}
		}
	}
	var kind error = errdefs.ErrUnknown
	switch {
	case st.Code == http.StatusNotFound:
		kind = errdefs.ErrNotFound
	case st.Code == http.StatusBadRequest:
		kind = errdefs.ErrInvalidArgument
	case st.Code >= 500:
		kind = errdefs.ErrUnavailable
	}
	return -1, fmt.Errorf("%w: the exec failed: %s", kind, Printable(cmp.Or(st.Message, st.Reason, "no reason given")))
}
