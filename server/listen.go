package server

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
)

// DefaultSocket is where airlock serve listens unless told otherwise.
const DefaultSocket = "/run/airlock/airlock.sock"

// SocketGroup owns the socket, with root, when it exists.
const SocketGroup = "airlock"

// ListenUnix listens on a unix socket at path, mode 0660, owned by root
// and the group airlock when it exists. A stale socket (one nobody
// answers on) is replaced; a live one is refused.
func ListenUnix(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("%w: creating the socket's directory: %v", errdefs.ErrUnavailable, err)
	}
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("%w: %s exists and is not a socket; remove it or give another --socket", errdefs.ErrInvalidArgument, path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("%w: another server answers on %s; stop it or give another --socket", errdefs.ErrConflict, path)
		}
		os.Remove(path)
	}
	// Made owner-only (no window where others may connect), then opened
	// to the group once its owner is set.
	old := syscall.Umask(0o177)
	l, err := (&net.ListenConfig{}).Listen(context.Background(), "unix", path)
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("%w: listening on %s: %v", errdefs.ErrUnavailable, path, err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(true)
	gid := -1
	if g, err := user.LookupGroup(SocketGroup); err == nil {
		gid, _ = strconv.Atoi(g.Gid)
	}
	if err := os.Chmod(path, 0o600); err == nil && gid >= 0 {
		err = os.Lchown(path, 0, gid)
		if err != nil {
			l.Close()
			return nil, fmt.Errorf("%w: giving %s to group %s: %v", errdefs.ErrUnavailable, path, SocketGroup, err)
		}
	}
	if err := os.Chmod(path, 0o660); err != nil {
		l.Close()
		return nil, fmt.Errorf("%w: setting the mode of %s: %v", errdefs.ErrUnavailable, path, err)
	}
	return l, nil
}

// IsLoopback reports whether addr's host is a loopback address.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ListenTCP listens on addr. A non-loopback address is refused unless TLS
// is given, as dockerd refuses -H tcp:// without it.
func ListenTCP(addr string, tlsConf *tls.Config) (net.Listener, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("%w: --listen %q: give HOST:PORT, such as 127.0.0.1:8787", errdefs.ErrInvalidArgument, addr)
	}
	if !IsLoopback(addr) && tlsConf == nil {
		return nil, fmt.Errorf("%w: --listen %q is not a loopback address: the API would be reachable from the network in clear text; give --tls-cert and --tls-key, or listen on 127.0.0.1", errdefs.ErrInvalidArgument, addr)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%w: listening on %s: %v", errdefs.ErrUnavailable, addr, err)
	}
	// TLS is put on in Accept, over the connection Serve counts.
	return &capListener{Listener: l, tls: tlsConf}, nil
}

// capListener holds at most cap(sem) connections open at once (any
// number with no sem): past that, Accept waits for one to close, and new
// connections wait in the kernel's backlog. With tls, it serves TLS over
// them, as tls.NewListener does.
type capListener struct {
	net.Listener
	tls  *tls.Config
	sem  chan struct{}
	done chan struct{}
	once sync.Once
}

// capConnections returns l holding at most n connections at once.
func capConnections(l net.Listener, n int) net.Listener {
	c, ok := l.(*capListener)
	if !ok {
		c = &capListener{Listener: l}
	}
	c.sem, c.done = make(chan struct{}, n), make(chan struct{})
	return c
}

func (l *capListener) Accept() (net.Conn, error) {
	if l.sem != nil {
		select {
		case l.sem <- struct{}{}:
		case <-l.done:
			return nil, net.ErrClosed
		}
	}
	c, err := l.Listener.Accept()
	if err != nil {
		if l.sem != nil {
			<-l.sem
		}
		return nil, err
	}
	if l.sem != nil {
		c = &capConn{Conn: c, sem: l.sem}
	}
	if l.tls != nil {
		c = tls.Server(c, l.tls)
	}
	return c, nil
}

func (l *capListener) Close() error {
	if l.done != nil {
		l.once.Do(func() { close(l.done) })
	}
	return l.Listener.Close()
}

// capConn gives its place back once closed.
type capConn struct {
	net.Conn
	sem  chan struct{}
	once sync.Once
}

// CloseWrite and ReadFrom keep what net/http uses of a TCP connection:
// the half-close after a refused body, and sendfile.
func (c *capConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *capConn) ReadFrom(r io.Reader) (int64, error) { return io.Copy(c.Conn, r) }

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { <-c.sem })
	return err
}

// LoadToken returns the bearer token: the first line of file when given,
// else <root>/server/token, generated (64 hex digits, mode 0600) when it
// does not exist yet.
func LoadToken(root, file string) (string, error) {
	if file == "" {
		file = filepath.Join(root, "server", "token")
		if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
			return "", fmt.Errorf("%w: creating the server directory: %v", errdefs.ErrUnavailable, err)
		}
		b := make([]byte, 32)
		rand.Read(b)
		// Created whole or not at all: a concurrent start never reads a
		// partial token, and the first creator's token wins.
		if err := atomicfile.Create(file, []byte(hex.EncodeToString(b)+"\n"), 0o600); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("%w: creating the token: %v", errdefs.ErrUnavailable, err)
		}
	}
	fi, err := os.Stat(file)
	if err != nil {
		return "", fmt.Errorf("%w: reading the token: %v", errdefs.ErrNotFound, err)
	}
	if fi.Mode().Perm()&0o026 != 0 {
		return "", fmt.Errorf("%w: the token file %s is readable by every user or writable by others than its owner (mode %v): chmod 600 it", errdefs.ErrInvalidArgument, file, fi.Mode().Perm())
	}
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("%w: reading the token: %v", errdefs.ErrNotFound, err)
	}
	tok, _, _ := strings.Cut(string(b), "\n")
	tok = strings.TrimSpace(tok)
	if len(tok) < 16 {
		return "", fmt.Errorf("%w: the token in %s is shorter than 16 characters; put a long random one there (openssl rand -hex 32)", errdefs.ErrInvalidArgument, file)
	}
	return tok, nil
}
