package netns

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"

	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// The pair's addresses, on one /30, and the name of either end in its
// namespace. 169.254.0.0/24 is the part of the link-local range that
// automatic configuration never picks (RFC 3927, 2.1).
const (
	ProxyAddr   = "169.254.0.1"
	SandboxAddr = "169.254.0.2"
	PrefixLen   = 30
	Iface       = "eth0"
)

const (
	sandboxSuffix = ".sandbox"
	proxySuffix   = ".proxy"
)

var idRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// Net is one sandbox's pair of namespaces.
type Net struct {
	dir, id string
}

// At names sandbox id's pair under dir, made or not: its paths, and, once
// made (by Create, in this process or another), its Listen and Listening.
func At(dir, id string) *Net { return &Net{dir: dir, id: id} }

// SandboxPath is the sandbox's namespace: the one its runtime joins.
func (n *Net) SandboxPath() string { return filepath.Join(n.dir, n.id+sandboxSuffix) }

// ProxyPath is the proxy's namespace, where Listen opens its listener.
func (n *Net) ProxyPath() string { return filepath.Join(n.dir, n.id+proxySuffix) }

// Create makes sandbox id's two namespaces under dir (made 0700 if
// missing) and the pair between them, addressed and up, with loopback up
// on both sides. On error, nothing it made is left.
func Create(ctx context.Context, dir, id string) (_ *Net, err error) {
	if !idRE.MatchString(id) {
		return nil, fmt.Errorf("network namespace for %q: not a sandbox id", id)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("making %s: %w", dir, err)
	}
	n := &Net{dir: dir, id: id}
	// Both paths are taken first, exclusively: a second Create of the same
	// id fails here, before it could remove the first one's.
	for _, p := range []string{n.SandboxPath(), n.ProxyPath()} {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o400)
		if err != nil {
			if p == n.ProxyPath() {
				os.Remove(n.SandboxPath())
			}
			return nil, fmt.Errorf("network namespace for %q: %w", id, err)
		}
		f.Close()
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, Remove(dir, id))
		}
	}()
	for _, p := range []string{n.SandboxPath(), n.ProxyPath()} {
		if err := newNS(p); err != nil {
			return nil, fmt.Errorf("making network namespace %s: %w", p, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := n.link(); err != nil {
		return nil, fmt.Errorf("joining the network namespaces of %q: %w", id, err)
	}
	return n, nil
}

// newNS makes a network namespace and binds it at path, on a thread of its
// own that is never given back: it ends, in that namespace, with its
// goroutine.
func newNS(path string) error {
	return OnSpentThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		self := "/proc/self/task/" + strconv.Itoa(unix.Gettid()) + "/ns/net"
		if err := unix.Mount(self, path, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding %s: %w", self, err)
		}
		return nil
	})
}

// OnSpentThread runs fn on a thread of its own that ends after it, so
// that a thread fn moved to another namespace never runs anything else.
// The process's main thread is never ended, only parked, by Go: fn never
// runs there, but on another thread while this one holds the main one.
func OnSpentThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			errc <- OnSpentThread(fn)
			runtime.UnlockOSThread()
			return
		}
		errc <- fn()
		// Returning still locked ends the thread.
	}()
	return <-errc
}

// inNS runs fn on a thread in the network namespace at path; the thread is
// never given back.
func inNS(path string, fn func() error) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return OnSpentThread(func() error {
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("entering %s: %w", path, err)
		}
		return fn()
	})
}

// link makes the pair, its sandbox end in the sandbox's namespace and its
// peer in the proxy's, then addresses both ends.
func (n *Net) link() error {
	pf, err := os.Open(n.ProxyPath())
	if err != nil {
		return err
	}
	defer pf.Close()
	peer, err := (&rtnetlink.LinkMessage{Attributes: &rtnetlink.LinkAttributes{Name: Iface}}).MarshalBinary()
	if err != nil {
		return err
	}
	nsAttr, err := netlink.MarshalAttributes([]netlink.Attribute{{Type: unix.IFLA_NET_NS_FD, Data: nativeUint32(uint32(pf.Fd()))}})
	if err != nil {
		return err
	}
	peer = append(peer, nsAttr...)
	err = inNS(n.SandboxPath(), func() error {
		c, err := rtnetlink.Dial(nil)
		if err != nil {
			return err
		}
		defer c.Close()
		return c.Link.New(&rtnetlink.LinkMessage{
			Family:     unix.AF_UNSPEC,
			Attributes: &rtnetlink.LinkAttributes{Name: Iface, Info: &rtnetlink.LinkInfo{Kind: "veth", Data: vethPeer(peer)}},
		})
	})
	runtime.KeepAlive(pf)
	if err != nil {
		return fmt.Errorf("making the veth pair: %w", err)
	}
	if err := inNS(n.SandboxPath(), func() error { return configure(SandboxAddr) }); err != nil {
		return fmt.Errorf("the sandbox's end: %w", err)
	}
	if err := inNS(n.ProxyPath(), func() error { return configure(ProxyAddr) }); err != nil {
		return fmt.Errorf("the proxy's end: %w", err)
	}
	return nil
}

// configure addresses the namespace's end of the pair and sets it and
// loopback up. It adds no route: the /30's own is the only one.
func configure(addr string) error {
	c, links, err := dialLinks()
	if err != nil {
		return err
	}
	defer c.Close()
	found := false
	for _, l := range links {
		if l.Attributes == nil {
			continue
		}
		switch l.Attributes.Name {
		case Iface:
			found = true
			if err := address(c, l.Index, addr); err != nil {
				return err
			}
		case "lo":
		default:
			return fmt.Errorf("unexpected interface %q", l.Attributes.Name)
		}
		if err := c.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Type: l.Type, Index: l.Index, Flags: unix.IFF_UP, Change: unix.IFF_UP}); err != nil {
			return fmt.Errorf("setting %s up: %w", l.Attributes.Name, err)
		}
	}
	if !found {
		return fmt.Errorf("no %s", Iface)
	}
	return nil
}

// dialLinks opens a netlink connection in the calling thread's namespace
// and lists its links.
func dialLinks() (*rtnetlink.Conn, []rtnetlink.LinkMessage, error) {
	c, err := rtnetlink.Dial(nil)
	if err != nil {
		return nil, nil, err
	}
	links, err := c.Link.List()
	if err != nil {
		c.Close()
		return nil, nil, err
	}
	return c, links, nil
}

// addressMessage is addr on link index, on the pair's /30.
func addressMessage(index uint32, addr string) *rtnetlink.AddressMessage {
	ip := net.ParseIP(addr).To4()
	return &rtnetlink.AddressMessage{
		Family: unix.AF_INET, PrefixLength: PrefixLen, Index: index,
		Attributes: &rtnetlink.AddressAttributes{Address: ip, Local: ip},
	}
}

// address gives link index addr, on the pair's /30.
func address(c *rtnetlink.Conn, index uint32, addr string) error {
	if err := c.Address.New(addressMessage(index, addr)); err != nil {
		return fmt.Errorf("adding %s/%d: %w", addr, PrefixLen, err)
	}
	return nil
}

// Readdress gives the sandbox's end of the pair its address again, if it
// lacks it. runsc's network stack takes the addresses of the interfaces it
// is given off the host's side (so that the host's kernel never answers
// for them), and a restore reads the namespace as a boot does: before a
// sandbox is restored into the namespace, its end must look as Create
// left it.
func (n *Net) Readdress() error {
	err := inNS(n.SandboxPath(), func() error {
		c, links, err := dialLinks()
		if err != nil {
			return err
		}
		defer c.Close()
		for _, l := range links {
			if l.Attributes != nil && l.Attributes.Name == Iface {
				if err := address(c, l.Index, SandboxAddr); err != nil && !errors.Is(err, unix.EEXIST) {
					return err
				}
				return nil
			}
		}
		return fmt.Errorf("no %s", Iface)
	})
	if err != nil {
		return fmt.Errorf("readdressing %s: %w", n.SandboxPath(), err)
	}
	return nil
}

// Listen opens a TCP listener on ProxyAddr:port in the proxy's namespace
// (port 0 picks one). Its socket keeps that namespace alive until it is
// closed.
func (n *Net) Listen(ctx context.Context, port int) (net.Listener, error) {
	var ln net.Listener
	err := inNS(n.ProxyPath(), func() (err error) {
		var lc net.ListenConfig
		ln, err = lc.Listen(ctx, "tcp4", net.JoinHostPort(ProxyAddr, strconv.Itoa(port)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listening in %s: %w", n.ProxyPath(), err)
	}
	return ln, nil
}

// Listening reports whether a socket listens on ProxyAddr:port in the
// proxy's namespace, from the namespace's own table of TCP sockets: no
// connection is made, so a proxy there records nothing.
func (n *Net) Listening(port int) (bool, error) {
	want := fmt.Sprintf("%08X:%04X", nativeUint32Of(net.ParseIP(ProxyAddr).To4()), port)
	listening := false
	err := inNS(n.ProxyPath(), func() error {
		b, err := os.ReadFile("/proc/thread-self/net/tcp")
		if err != nil {
			return err
		}
		// sl local_address rem_address st ...; st 0A is LISTEN.
		for _, line := range strings.Split(string(b), "\n")[1:] {
			if f := strings.Fields(line); len(f) > 3 && f[1] == want && f[3] == "0A" {
				listening = true
			}
		}
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("reading the sockets in %s: %w", n.ProxyPath(), err)
	}
	return listening, nil
}

// Remove unbinds and removes sandbox id's namespaces under dir; what is
// already gone is no error. The namespaces end once no process or socket
// is left in them, and the pair with them.
func Remove(dir, id string) error {
	if !idRE.MatchString(id) {
		return fmt.Errorf("network namespace for %q: not a sandbox id", id)
	}
	var errs []error
	for _, suffix := range []string{sandboxSuffix, proxySuffix} {
		p := filepath.Join(dir, id+suffix)
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unbinding %s: %w", p, err))
			continue
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("removing %s: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// List returns the ids with a namespace under dir, sorted; a missing dir
// has none.
func List(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range ents {
		name := e.Name()
		id, ok := strings.CutSuffix(name, sandboxSuffix)
		if !ok {
			id, ok = strings.CutSuffix(name, proxySuffix)
		}
		if ok && idRE.MatchString(id) && !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids, nil
}

// vethPeer is a veth link's data: the peer's link message, whose
// IFLA_NET_NS_FD puts it in the proxy's namespace.
type vethPeer []byte

func (v vethPeer) New() rtnetlink.LinkDriver { return vethPeer(nil) }

func (v vethPeer) Encode(ae *netlink.AttributeEncoder) error {
	ae.Bytes(1 /* VETH_INFO_PEER */, v)
	return nil
}

func (vethPeer) Decode(*netlink.AttributeDecoder) error { return nil }

func (vethPeer) Kind() string { return "veth" }

func nativeUint32(v uint32) []byte { return binary.NativeEndian.AppendUint32(nil, v) }

// nativeUint32Of is the IPv4 address b as the kernel's tables print it:
// its bytes read as a number in the host's order.
func nativeUint32Of(b []byte) uint32 { return binary.NativeEndian.Uint32(b) }

// ListenPacket opens a UDP socket on ProxyAddr:port in the proxy's
// namespace. Its socket keeps that namespace alive until it is closed.
func (n *Net) ListenPacket(ctx context.Context, port int) (net.PacketConn, error) {
	var pc net.PacketConn
	err := inNS(n.ProxyPath(), func() (err error) {
		var lc net.ListenConfig
		pc, err = lc.ListenPacket(ctx, "udp4", net.JoinHostPort(ProxyAddr, strconv.Itoa(port)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listening for UDP in %s: %w", n.ProxyPath(), err)
	}
	return pc, nil
}
