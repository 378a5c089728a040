//go:build e2e && linux

package netns

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jsimonetti/rtnetlink/v2"
)

func hostLinks(t *testing.T) []string {
	t.Helper()
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, i := range ifs {
		names = append(names, i.Name)
	}
	slices.Sort(names)
	return names
}

func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// sandboxSide runs fn in n's sandbox namespace, as a sandbox's program
// would reach the network.
func sandboxSide(t *testing.T, n *Net, fn func() error) {
	t.Helper()
	if err := inNS(n.SandboxPath(), fn); err != nil {
		t.Error(err)
	}
}

func dialErr(network, addr string) error {
	c, err := net.DialTimeout(network, addr, 2*time.Second)
	if err == nil {
		c.Close()
	}
	return err
}

// From the sandbox's namespace, the proxy's listener is the one thing
// reachable: its other ports refuse, UDP (a DNS query) gets nothing,
// every other address is unreachable, and the host's loopback is not
// there. Nothing of it shows on the host, and nothing is left after
// Remove.
func TestPair(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	before := hostLinks(t)
	dir := filepath.Join(t.TempDir(), "netns")
	ctx := context.Background()
	n, err := Create(ctx, dir, "sb-0123456789abcdef0123")
	if err != nil {
		t.Fatal(err)
	}
	removed := false
	t.Cleanup(func() {
		if !removed {
			Remove(dir, "sb-0123456789abcdef0123")
		}
	})
	if ok, err := At(dir, "sb-0123456789abcdef0123").Listening(3128); ok || err != nil {
		t.Errorf("Listening before Listen: %v, %v", ok, err)
	}
	ln, err := n.Listen(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	proxyPort := ln.Addr().(*net.TCPAddr).Port
	if ok, err := At(dir, "sb-0123456789abcdef0123").Listening(proxyPort); !ok || err != nil {
		t.Errorf("Listening after Listen: %v, %v", ok, err)
	}
	accepted := make(chan string, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c.RemoteAddr().String()
			io.WriteString(c, "proxy\n")
			c.Close()
		}
	}()
	host, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	hostAccepted := make(chan struct{}, 1)
	go func() {
		if c, err := host.Accept(); err == nil {
			hostAccepted <- struct{}{}
			c.Close()
		}
	}()

	if got := hostLinks(t); !slices.Equal(got, before) {
		t.Errorf("the host's interfaces changed: %v, then %v", before, got)
	}
	sandboxSide(t, n, func() error {
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		var names []string
		for _, i := range ifs {
			names = append(names, i.Name)
		}
		if slices.Sort(names); !slices.Equal(names, []string{Iface, "lo"}) {
			t.Errorf("interfaces in the sandbox's namespace: %v", names)
		}
		routes, err := os.ReadFile("/proc/thread-self/net/route")
		if err != nil {
			return err
		}
		for _, line := range strings.Split(string(routes), "\n")[1:] {
			if f := strings.Fields(line); len(f) > 1 && f[1] == "00000000" {
				t.Errorf("a default route: %s", line)
			}
		}
		// The proxy answers.
		c, err := net.DialTimeout("tcp4", net.JoinHostPort(ProxyAddr, strconv.Itoa(proxyPort)), 2*time.Second)
		if err != nil {
			t.Errorf("dialling the proxy: %v", err)
		} else {
			b, _ := io.ReadAll(c)
			c.Close()
			if string(b) != "proxy\n" {
				t.Errorf("the proxy said %q", b)
			}
		}
		// Its other ports, and any other address, do not.
		if err := dialErr("tcp4", net.JoinHostPort(ProxyAddr, "22")); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("the proxy's neighbour port 22: %v; want ECONNREFUSED", err)
		}
		if err := dialErr("tcp4", net.JoinHostPort(ProxyAddr, strconv.Itoa(host.Addr().(*net.TCPAddr).Port))); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("the host listener's port at the proxy's address: %v; want ECONNREFUSED", err)
		}
		if err := dialErr("tcp4", host.Addr().String()); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Errorf("the host's loopback listener: %v; want ECONNREFUSED", err)
		}
		for _, addr := range []string{"192.0.2.1:80", "169.254.169.254:80", "10.0.0.1:80", "169.254.0.3:80"} {
			if err := dialErr("tcp4", addr); !errors.Is(err, syscall.ENETUNREACH) {
				t.Errorf("%s: %v; want ENETUNREACH", addr, err)
			}
		}
		if err := dialErr("udp4", "192.0.2.53:53"); err == nil {
			// A connected UDP socket to an unreachable address may be made;
			// its first write must then fail.
			c, _ := net.Dial("udp4", "192.0.2.53:53")
			if _, err := c.Write([]byte("q")); !errors.Is(err, syscall.ENETUNREACH) {
				t.Errorf("UDP to 192.0.2.53: %v; want ENETUNREACH", err)
			}
			c.Close()
		}
		// A DNS query to the proxy's address gets no answer.
		c, err = net.Dial("udp4", net.JoinHostPort(ProxyAddr, "53"))
		if err != nil {
			return err
		}
		defer c.Close()
		c.Write([]byte("\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00\x07example\x03org\x00\x00\x01\x00\x01"))
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 512)); err == nil {
			t.Error("a DNS query to the proxy's address was answered")
		}
		if _, err := net.DefaultResolver.LookupHost(context.Background(), "example.org"); err == nil {
			t.Error("a name resolved in the sandbox's namespace")
		}
		return nil
	})
	select {
	case <-hostAccepted:
		t.Error("the host's loopback listener accepted a connection from the sandbox's namespace")
	default:
	}
	if got := len(accepted); got != 1 {
		t.Errorf("the proxy accepted %d connections, want 1", got)
	}
	if from := <-accepted; !strings.HasPrefix(from, SandboxAddr+":") {
		t.Errorf("the proxy's connection came from %s", from)
	}
	if ids, err := List(dir); err != nil || !slices.Equal(ids, []string{"sb-0123456789abcdef0123"}) {
		t.Errorf("List: %v, %v", ids, err)
	}

	held := nsInodes(t, n)
	ln.Close()
	if err := Remove(dir, "sb-0123456789abcdef0123"); err != nil {
		t.Fatal(err)
	}
	removed = true
	if err := Remove(dir, "sb-0123456789abcdef0123"); err != nil {
		t.Errorf("a second Remove: %v", err)
	}
	if ids, err := List(dir); err != nil || len(ids) != 0 {
		t.Errorf("List after Remove: %v, %v", ids, err)
	}
	if m := mountsUnder(t, dir); len(m) != 0 {
		t.Errorf("mounts left: %v", m)
	}
	if got := hostLinks(t); !slices.Equal(got, before) {
		t.Errorf("the host's interfaces changed: %v, then %v", before, got)
	}
	// No thread of this process stayed in either namespace, so with their
	// mounts gone they end.
	// A thread that entered one ends with its goroutine, shortly after.
	deadline := time.Now().Add(5 * time.Second)
	for {
		var in []string
		tasks, _ := filepath.Glob("/proc/self/task/*/ns/net")
		for _, task := range tasks {
			if l, err := os.Readlink(task); err == nil && slices.Contains(held, l) {
				in = append(in, task+" in "+l)
			}
		}
		if len(in) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("threads still in the namespaces: %v", in)
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// nsInodes are n's two namespaces as /proc names them ("net:[4026…]").
func nsInodes(t *testing.T, n *Net) []string {
	t.Helper()
	var out []string
	for _, p := range []string{n.SandboxPath(), n.ProxyPath()} {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		out = append(out, "net:["+strconv.FormatUint(st.Ino, 10)+"]")
	}
	return out
}

// A Create that fails leaves nothing, and never removes another's.
func TestCreateFailsClosed(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := filepath.Join(t.TempDir(), "netns")
	ctx := context.Background()
	const id = "sb-00000000000000000001"
	n, err := Create(ctx, dir, id)
	if err != nil {
		t.Fatal(err)
	}
	defer Remove(dir, id)
	if _, err := Create(ctx, dir, id); err == nil {
		t.Fatal("a second Create of one id succeeded")
	}
	if err := inNS(n.SandboxPath(), func() error { return nil }); err != nil {
		t.Errorf("the first Create's namespace is gone: %v", err)
	}
	for _, bad := range []string{"", "../x", "a/b", ".x"} {
		if _, err := Create(ctx, dir, bad); err == nil {
			t.Errorf("Create(%q) succeeded", bad)
		}
	}
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Create(canceled, dir, "sb-00000000000000000002"); err == nil {
		t.Error("a canceled Create succeeded")
	}
	if ids, _ := List(dir); !slices.Equal(ids, []string{id}) {
		t.Errorf("left after failed creates: %v", ids)
	}
	if err := Remove(dir, id); err != nil {
		t.Fatal(err)
	}
	if m := mountsUnder(t, dir); len(m) != 0 {
		t.Errorf("mounts left: %v", m)
	}
}

// sandboxAddrs lists the IPv4 addresses of the sandbox's end.
func sandboxAddrs(t *testing.T, n *Net) []string {
	t.Helper()
	var out []string
	sandboxSide(t, n, func() error {
		ifc, err := net.InterfaceByName(Iface)
		if err != nil {
			return err
		}
		addrs, err := ifc.Addrs()
		for _, a := range addrs {
			if ip, ok := a.(*net.IPNet); ok && ip.IP.To4() != nil {
				out = append(out, a.String())
			}
		}
		return err
	})
	return out
}

// Readdress puts back the sandbox's address that runsc's boot takes off
// its end (as a restore needs it), and leaves an end that has it as it
// is; the proxy is reachable again from the sandbox's side.
func TestReaddress(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	const id = "sb-0123456789abcdef0124"
	dir := filepath.Join(t.TempDir(), "netns")
	ctx := context.Background()
	n, err := Create(ctx, dir, id)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { Remove(dir, id) })
	ln, err := n.Listen(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	proxy := ln.Addr().String()
	want := []string{SandboxAddr + "/30"}
	if got := sandboxAddrs(t, n); !slices.Equal(got, want) {
		t.Fatalf("the sandbox's end after Create: %v", got)
	}
	if err := n.Readdress(); err != nil {
		t.Errorf("Readdress of an end that has its address: %v", err)
	}
	// As runsc's boot does: the address leaves the host's side.
	sandboxSide(t, n, func() error {
		c, err := rtnetlink.Dial(nil)
		if err != nil {
			return err
		}
		defer c.Close()
		ifc, err := net.InterfaceByName(Iface)
		if err != nil {
			return err
		}
		return c.Address.Delete(addressMessage(uint32(ifc.Index), SandboxAddr))
	})
	if got := sandboxAddrs(t, n); len(got) != 0 {
		t.Fatalf("the sandbox's end after its address was removed: %v", got)
	}
	sandboxSide(t, n, func() error {
		if dialErr("tcp4", proxy) == nil {
			t.Error("the proxy answered an end with no address")
		}
		return nil
	})
	if err := n.Readdress(); err != nil {
		t.Fatal(err)
	}
	if got := sandboxAddrs(t, n); !slices.Equal(got, want) {
		t.Errorf("the sandbox's end after Readdress: %v, want %v", got, want)
	}
	sandboxSide(t, n, func() error { return dialErr("tcp4", proxy) })
}
