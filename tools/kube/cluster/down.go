package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Ready reports, as an error, why the control plane recorded under l is not
// up: a component whose recorded pid is not running, or an apiserver whose
// /readyz does not answer.
func Ready(ctx context.Context, l Layout) error {
	for _, n := range Components {
		pid, err := readPid(l, n)
		if err != nil {
			return err
		}
		if pid == 0 || !ours(pid, l.Bin()) {
			return fmt.Errorf("%s is not running", n)
		}
	}
	ports, err := ReadPorts(l)
	if err != nil {
		return err
	}
	client, err := clientFor(l, "admin")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return getOK(ctx, client, "https://127.0.0.1:"+strconv.Itoa(ports[portAPIServer])+"/readyz")
}

// Pids returns the recorded pid of every component that has one.
func Pids(l Layout) (map[string]int, error) {
	pids := map[string]int{}
	for _, n := range Components {
		pid, err := readPid(l, n)
		if err != nil {
			return nil, err
		}
		if pid != 0 {
			pids[n] = pid
		}
	}
	return pids, nil
}

// Down stops the recorded processes and removes the runtime state and the
// kubeconfig; the built binaries stay.
func Down(ctx context.Context, l Layout, logf Logf) error {
	if err := stopAll(ctx, l, logf); err != nil {
		return err
	}
	if err := os.RemoveAll(l.Run()); err != nil {
		return fmt.Errorf("removing %s: %w", l.Run(), err)
	}
	if err := os.Remove(l.Kubeconfig()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// Clean is Down, then removes the built binaries and <root>/kube itself.
func Clean(ctx context.Context, l Layout, logf Logf) error {
	if err := Down(ctx, l, logf); err != nil {
		return err
	}
	return os.RemoveAll(l.Dir)
}

// stopAll stops the recorded processes, last started first, each only if
// /proc shows it still runs a binary from bin/.
func stopAll(ctx context.Context, l Layout, logf Logf) error {
	var errs []error
	for i := len(Components) - 1; i >= 0; i-- {
		n := Components[i]
		pid, err := readPid(l, n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if pid == 0 {
			continue
		}
		switch {
		case ours(pid, l.Bin()):
			if err := stop(pid, 15*time.Second); err != nil {
				errs = append(errs, fmt.Errorf("stopping %s: %w", n, err))
				continue
			}
			logf("stopped %s (pid %d)", n, pid)
		case alive(pid):
			logf("pid %d, recorded for %s, runs another program now: left alone", pid, n)
		}
		if err := os.Remove(l.PidFile(n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
		if ctx.Err() != nil {
			errs = append(errs, ctx.Err())
			break
		}
	}
	return errors.Join(errs...)
}

// clientFor trusts the control plane's CA only and presents the client
// certificate <name>.crt.
func clientFor(l Layout, name string) (*http.Client, error) {
	cert, err := tls.LoadX509KeyPair(filepath.Join(l.PKI(), name+".crt"), filepath.Join(l.PKI(), name+".key"))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(filepath.Join(l.PKI(), "ca.crt"))
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, errors.New("no CA certificate in " + filepath.Join(l.PKI(), "ca.crt"))
	}
	return &http.Client{
		Timeout: 5 * time.Second,
		Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
			DisableKeepAlives: true,
		},
	}, nil
}
