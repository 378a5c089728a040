package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/e2etest"
	"github.com/airlock-sandbox/airlock/internal/netns"
	"github.com/airlock-sandbox/airlock/isolation"
)

// downloader is the sandbox's client: Python's urllib, as a program in a
// sandbox would fetch a file. It takes rounds, then NAME=URL[,proxy]
// scenarios; warms each once, then times each GET, read to the end, in
// turn, and prints the seconds per scenario as JSON. Certificates are not
// checked: the test CA is not what is measured.
const downloader = `
import json, ssl, sys, time, urllib.request
rounds, size = int(sys.argv[1]), int(sys.argv[2])
ctx = ssl.create_default_context()
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
direct = urllib.request.build_opener(urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=ctx))
proxied = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ctx))
scen = []
for a in sys.argv[3:]:
    name, rest = a.split("=", 1)
    url, _, how = rest.partition(",")
    scen.append((name, url, proxied if how == "proxy" else direct))
buf = bytearray(1 << 20)
def get(op, url):
    n = 0
    with op.open(url) as r:
        while True:
            k = r.readinto(buf)
            if not k:
                break
            n += k
    if n != size:
        raise SystemExit("%s: %d bytes, want %d" % (url, n, size))
for s in scen:
    get(s[2], s[1])
out = {s[0]: [] for s in scen}
for _ in range(rounds):
    for name, url, op in scen:
        t = time.perf_counter()
        get(op, url)
        out[name].append(time.perf_counter() - t)
print(json.dumps(out))
`

// inSandboxes are the namespaces' large GETs made by a program in a real
// sandbox of the oci engine, under gVisor and under runc, through its own
// proxy (allowing the host's twins) and direct to servers in its proxy's
// namespace. The client is in the sandbox, so gVisor's network stack is
// in the path. Each sandbox serves as many rounds as its proxy's default
// byte cap (1 GiB) lets through, and the next is made, so that the modes
// take turns.
// It needs setup's store, runsc and default image (python3). Root only.
func inSandboxes(h http.Handler, size, rounds int) ([]*scenario, error) {
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("the sandboxes' scenarios need root")
	}
	tmp, err := os.MkdirTemp("", "airlock-bench-egress-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	bin, err := e2etest.Build(tmp, "./cmd/airlock")
	if err != nil {
		return nil, err
	}
	root, err := e2etest.Root(tmp, e2etest.SysRoot())
	if err != nil {
		return nil, fmt.Errorf("%w (run `make setup` first)", err)
	}
	defer exec.Command("umount", "-l", filepath.Join(root, "oci", "runsc", "null-netns")).Run()

	plain := httptest.NewServer(h)
	defer plain.Close()
	secure := httptest.NewTLSServer(h)
	defer secure.Close()
	plainHost, secureHost := strings.TrimPrefix(plain.URL, "http://"), strings.TrimPrefix(secure.URL, "https://")

	perSandbox := max(1, int(int64(isolation.DefaultEgressBytes)/int64(2*size))-1)
	modes := []string{"gvisor", "seccomp"}
	mib := size >> 20
	var out []*scenario
	for _, m := range modes {
		out = append(out,
			&scenario{name: fmt.Sprintf("%d MiB http GET, %s sandbox, direct", mib, m), bytes: size, noCPU: true},
			&scenario{name: fmt.Sprintf("%d MiB http GET, %s sandbox, proxy", mib, m), bytes: size, noCPU: true},
			&scenario{name: fmt.Sprintf("%d MiB https GET, %s sandbox, direct", mib, m), bytes: size, noCPU: true},
			&scenario{name: fmt.Sprintf("%d MiB https GET, %s sandbox, CONNECT", mib, m), bytes: size, noCPU: true},
		)
	}
	for done := 0; done < rounds; done += perSandbox {
		k := min(perSandbox, rounds-done)
		for i, m := range modes {
			took, err := sandboxRounds(bin, root, m, h, plainHost, secureHost, size, k)
			if err != nil {
				return nil, fmt.Errorf("%s sandbox: %w", m, err)
			}
			for j, name := range []string{"hd", "hp", "sd", "sp"} {
				s := out[4*i+j]
				for _, sec := range took[name] {
					s.took = append(s.took, time.Duration(sec*float64(time.Second)))
				}
			}
		}
		fmt.Fprintf(os.Stderr, "sandboxes: %d of %d rounds\n", done+k, rounds)
	}
	return out, nil
}

// sandboxRounds makes one sandbox of mode allowed to reach the host's
// twins, serves h in its proxy's namespace, and runs the downloader in it.
func sandboxRounds(bin, root, mode string, h http.Handler, plainHost, secureHost string, size, rounds int) (map[string][]float64, error) {
	cli := func(args ...string) (string, error) {
		out, err := exec.Command(bin, append([]string{"--root", root}, args...)...).Output()
		if ee, ok := err.(*exec.ExitError); ok {
			return "", fmt.Errorf("airlock %s: %v: %s", args[0], err, ee.Stderr)
		}
		return strings.TrimSpace(string(out)), err
	}
	id, err := cli("sandbox", "create", "--engine", "oci", "--isolation", mode, "--memory", "1GiB", "--ttl", "30m",
		"--allow-host", plainHost, "--allow-host", secureHost)
	if err != nil {
		return nil, err
	}
	defer cli("sandbox", "rm", id)
	// The direct servers, where the sandbox's proxy listens. They close
	// before the sandbox is removed: a listener keeps its namespace alive.
	_, stop, err := serveDirect(context.Background(), netns.At(filepath.Join(root, "oci", "netns"), id), h)
	if err != nil {
		return nil, err
	}
	defer stop()

	at := func(port int) string { return net.JoinHostPort(netns.ProxyAddr, strconv.Itoa(port)) }
	out, err := cli("exec", id, "--timeout", "10m", "--", "python3", "-c", downloader, strconv.Itoa(rounds), strconv.Itoa(size),
		"hd=http://"+at(directPort)+"/blob",
		"hp=http://"+plainHost+"/blob,proxy",
		"sd=https://"+at(directTLSPort)+"/blob",
		"sp=https://"+secureHost+"/blob,proxy")
	if err != nil {
		return nil, err
	}
	var took map[string][]float64
	if err := json.Unmarshal([]byte(out), &took); err != nil {
		return nil, fmt.Errorf("the downloader's answer %q: %w", out, err)
	}
	return took, nil
}
