//go:build e2e

package netnstest

import (
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The host reaches a server in the stand-in internet at Addr, which is
// not one of its own; the namespace's loopback is not the host's; and
// the host's end of the pair is gone when the test ends.
func TestInternet(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	link := "alinet" + strconv.Itoa(os.Getpid()%1_000_000_000)
	t.Run("reach", func(t *testing.T) {
		in := New(t)
		ln := in.Listen(t, 0)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				io.WriteString(c, c.LocalAddr().String())
				c.Close()
			}
		}()
		c, err := net.DialTimeout("tcp4", ln.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatalf("dialling the stand-in internet: %v", err)
		}
		got, _ := io.ReadAll(c)
		c.Close()
		if string(got) != ln.Addr().String() || !strings.HasPrefix(ln.Addr().String(), Addr+":") {
			t.Errorf("the server answered %q at %s", got, ln.Addr())
		}
		addrs, err := net.InterfaceAddrs()
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range addrs {
			if strings.HasPrefix(a.String(), Addr+"/") {
				t.Errorf("the host has the stand-in internet's address %s", a)
			}
		}
		if _, err := net.InterfaceByName(link); err != nil {
			t.Errorf("the host's end %s: %v", link, err)
		}
	})
	if _, err := net.InterfaceByName(link); err == nil {
		t.Errorf("the host's end %s is left", link)
	}
}
