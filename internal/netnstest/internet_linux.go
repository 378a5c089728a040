// Package netnstest makes a stand-in internet for tests: a network
// namespace of the test's own, joined to the host's by a veth pair, so
// that a server in it is a host the egress proxy dials from the host's
// namespace as it would dial a real one, at an address that is not the
// host's own. Root only; everything it makes goes when the test ends.
package netnstest

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/netns"
	"github.com/jsimonetti/rtnetlink/v2"
	"github.com/jsimonetti/rtnetlink/v2/driver"
	"golang.org/x/sys/unix"
)

// The pair's addresses, on one /30 of 198.18.0.0/15 (set aside for
// benchmarking, RFC 2544): no real network uses it, and the proxy counts
// it as not public, so an allowlist names Addr exactly, as it would a
// lab's mirror on a private address.
const (
	HostAddr  = "198.18.28.1"
	Addr      = "198.18.28.2"
	prefixLen = 30
	iface     = "eth0"
)

// Internet is the namespace; Listen opens its servers' listeners.
type Internet struct {
	ns *os.File
}

// New makes the namespace and the pair, the host's end named after this
// process, and removes them both when the test ends.
func New(t testing.TB) *Internet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("a stand-in internet needs root")
	}
	hostLink := "alinet" + strconv.Itoa(os.Getpid()%1_000_000_000)
	// The pid form is not opened: it cannot fail.
	host, _ := rtnetlink.NewNetNS(uint32(os.Getpid()))
	var ns *os.File
	err := netns.OnSpentThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare: %w", err)
		}
		f, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			return err
		}
		ns = f
		c, err := rtnetlink.Dial(nil)
		if err != nil {
			return err
		}
		defer c.Close()
		// The peer goes to the process's main thread's namespace: the host's.
		err = c.Link.New(&rtnetlink.LinkMessage{
			Family: unix.AF_UNSPEC,
			Attributes: &rtnetlink.LinkAttributes{Name: iface, Info: &rtnetlink.LinkInfo{Kind: "veth", Data: &driver.Veth{
				PeerInfo: &rtnetlink.LinkMessage{Attributes: &rtnetlink.LinkAttributes{
					Name: hostLink, NetNS: host,
				}},
			}}},
		})
		if err != nil {
			return fmt.Errorf("making the veth pair: %w", err)
		}
		for _, name := range []string{"lo", iface} {
			if err := up(c, name, Addr); err != nil {
				return err
			}
		}
		return nil
	})
	if ns != nil {
		t.Cleanup(func() { ns.Close() })
	}
	if err != nil {
		t.Fatalf("the stand-in internet's namespace: %v", err)
	}
	c, err := rtnetlink.Dial(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	t.Cleanup(func() {
		c, err := rtnetlink.Dial(nil)
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		if l, err := byName(c, hostLink); err != nil {
			t.Errorf("the stand-in internet's link: %v", err)
		} else if err := c.Link.Delete(l.Index); err != nil {
			t.Errorf("removing %s: %v", hostLink, err)
		}
	})
	if err := up(c, hostLink, HostAddr); err != nil {
		t.Fatalf("the host's end of the stand-in internet: %v", err)
	}
	return &Internet{ns: ns}
}

// Listen opens a TCP listener on Addr:port in the namespace, closed when
// the test ends.
func (in *Internet) Listen(t testing.TB, port int) net.Listener {
	t.Helper()
	var ln net.Listener
	err := netns.OnSpentThread(func() (err error) {
		if err := unix.Setns(int(in.ns.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("entering the namespace: %w", err)
		}
		ln, err = (&net.ListenConfig{}).Listen(context.Background(), "tcp4", net.JoinHostPort(Addr, strconv.Itoa(port)))
		return err
	})
	if err != nil {
		t.Fatalf("listening in the stand-in internet: %v", err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func byName(c *rtnetlink.Conn, name string) (rtnetlink.LinkMessage, error) {
	links, err := c.Link.List()
	if err != nil {
		return rtnetlink.LinkMessage{}, err
	}
	for _, l := range links {
		if l.Attributes != nil && l.Attributes.Name == name {
			return l, nil
		}
	}
	return rtnetlink.LinkMessage{}, fmt.Errorf("no link %q", name)
}

// up sets link name up, with addr on the pair's /30 unless it is loopback.
func up(c *rtnetlink.Conn, name, addr string) error {
	l, err := byName(c, name)
	if err != nil {
		return err
	}
	if name != "lo" {
		ip := net.ParseIP(addr).To4()
		if err := c.Address.New(&rtnetlink.AddressMessage{
			Family: unix.AF_INET, PrefixLength: prefixLen, Index: l.Index,
			Attributes: &rtnetlink.AddressAttributes{Address: ip, Local: ip},
		}); err != nil {
			return fmt.Errorf("adding %s/%d to %s: %w", addr, prefixLen, name, err)
		}
	}
	if err := c.Link.Set(&rtnetlink.LinkMessage{Family: unix.AF_UNSPEC, Type: l.Type, Index: l.Index, Flags: unix.IFF_UP, Change: unix.IFF_UP}); err != nil {
		return fmt.Errorf("setting %s up: %w", name, err)
	}
	return nil
}
