package egress

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// errByteLimit ends a connection that would pass the sandbox's byte cap.
var errByteLimit = errors.New("the sandbox's egress byte limit is reached")

// budget is a sandbox's byte cap, shared by all its connections.
type budget struct {
	max  int64
	used atomic.Int64
}

// take grants up to n bytes; ok says all n were granted.
func (b *budget) take(n int) (granted int, ok bool) {
	for {
		u := b.used.Load()
		left := b.max - u
		if left <= 0 {
			return 0, n == 0
		}
		g := int64(n)
		if g > left {
			g = left
		}
		if b.used.CompareAndSwap(u, u+g) {
			return int(g), g == int64(n)
		}
	}
}

func (b *budget) spent() bool { return b.used.Load() >= b.max }

// idle closes a client connection, and the upstream one it has open, once
// neither has moved a byte for d.
type idle struct {
	d     time.Duration
	last  atomic.Int64
	fired atomic.Bool
	t     *time.Timer

	mu     sync.Mutex
	client net.Conn
	up     net.Conn
}

func newIdle(d time.Duration, client net.Conn) *idle {
	i := &idle{d: d, client: client}
	i.touch()
	i.t = time.AfterFunc(d, i.check)
	return i
}

func (i *idle) touch() { i.last.Store(time.Now().UnixNano()) }

func (i *idle) check() {
	if quiet := time.Since(time.Unix(0, i.last.Load())); quiet < i.d {
		i.t.Reset(i.d - quiet)
		return
	}
	i.fired.Store(true)
	i.mu.Lock()
	defer i.mu.Unlock()
	i.client.Close()
	if i.up != nil {
		i.up.Close()
	}
}

// setUp names the upstream connection to close with the client's; nil
// when there is none.
func (i *idle) setUp(c net.Conn) {
	i.mu.Lock()
	i.up = c
	i.mu.Unlock()
}

func (i *idle) stop() { i.t.Stop() }

// activeConn is the client's connection: every byte either way resets its
// idle timer.
type activeConn struct {
	net.Conn
	idle *idle
}

func (c activeConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.idle.touch()
	}
	return n, err
}

func (c activeConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.idle.touch()
	}
	return n, err
}

// meterConn is an upstream connection: it counts the bytes each way,
// takes them from the sandbox's budget and resets the idle timer.
type meterConn struct {
	net.Conn
	idle     *idle
	budget   *budget
	up, down atomic.Int64
	capped   atomic.Bool
}

func (c *meterConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.idle.touch()
		g, ok := c.budget.take(n)
		c.down.Add(int64(g))
		if !ok {
			c.capped.Store(true)
			return g, errByteLimit
		}
	}
	return n, err
}

func (c *meterConn) Write(b []byte) (int, error) {
	g, ok := c.budget.take(len(b))
	n, err := c.Conn.Write(b[:g])
	if n < g {
		c.budget.used.Add(-int64(g - n)) // not sent: not spent
	}
	c.up.Add(int64(n))
	if n > 0 {
		c.idle.touch()
	}
	if err == nil && !ok {
		c.capped.Store(true)
		err = errByteLimit
	}
	return n, err
}

// capReader caps what may be read through it while a header is read, and
// nothing after: a header larger than the cap fails to parse instead of
// growing without bound.
type capReader struct {
	r io.Reader
	n int64 // < 0: no cap
}

func (c *capReader) Read(b []byte) (int, error) {
	if c.n < 0 {
		return c.r.Read(b)
	}
	if c.n == 0 {
		return 0, errHeaderTooLarge
	}
	if int64(len(b)) > c.n {
		b = b[:c.n]
	}
	n, err := c.r.Read(b)
	c.n -= int64(n)
	return n, err
}

var errHeaderTooLarge = errors.New("header too large")
