package service_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlock-sandbox/airlock/admission"
	"github.com/airlock-sandbox/airlock/internal/fuzztest"
	"github.com/airlock-sandbox/airlock/kube/claim"
	"github.com/airlock-sandbox/airlock/kube/cluster/clustertest"
	"github.com/airlock-sandbox/airlock/lifecycle"
	"github.com/airlock-sandbox/airlock/service"
)

// A sandbox claimed on a cluster counts against --max-sandboxes while its
// record exists, creating or ready: a new sandbox or run, local or on the
// cluster, is refused; once rm has deleted the claim, one is admitted.
func TestAdmitCountsClaims(t *testing.T) {
	ctx := context.Background()
	const claims = "/apis/extensions.agents.x-k8s.io/v1beta1/namespaces/default/sandboxclaims"
	var made atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+claims, func(w http.ResponseWriter, r *http.Request) {
		made.Add(1)
		http.Error(w, "no", http.StatusForbidden)
	})
	mux.HandleFunc("DELETE "+claims+"/{name}", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"kind":"Status","status":"Success"}`))
	})
	mux.HandleFunc("GET "+claims+"/{name}", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNotFound)
		w.Write([]byte(`{"kind":"Status","status":"Failure","reason":"NotFound","code":404}`))
	})
	cfg, kc := clustertest.Serve(t, mux)
	for _, state := range []string{claim.Creating, claim.Ready} {
		root := t.TempDir()
		s := service.New(root, &fuzztest.NoEngines{}, service.WithAdmission(admission.New(root, 1)),
			service.WithKube(service.KubeTarget{Kubeconfig: kc, Context: "x", Namespace: "default"}))
		id := "sb-0123456789abcdef0123"
		b, _ := json.Marshal(claim.Record{ID: id, State: state, Engine: claim.Engine, Kubeconfig: kc, Context: "x", Server: cfg.Server,
			Namespace: "default", Claim: id, WarmPool: "py"})
		if err := os.MkdirAll(filepath.Join(root, "claims"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, "claims", id+".json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
		var over *admission.OverLimitError
		if release, err := s.Admit(); !errors.As(err, &over) || over.Live != 1 {
			if release != nil {
				release()
			}
			t.Errorf("%s claim: a local admission under 1: %v", state, err)
		}
		if s.Room() {
			t.Errorf("%s claim: room under 1", state)
		}
		if _, err := s.CreateKubeFor(ctx, "py", nil, 0); !errors.As(err, &over) {
			t.Errorf("%s claim: a second claim under 1: %v", state, err)
		}
		if n := made.Load(); n > 0 {
			t.Fatalf("%s claim: %d claims made past the limit", state, n)
		}
		if err := s.Destroy(ctx, id); err != nil {
			t.Fatalf("%s claim: rm: %v", state, err)
		}
		release, err := s.Admit()
		if err != nil {
			t.Fatalf("%s claim: admission once it is removed: %v", state, err)
		}
		release()
	}
}

// A claim record that cannot be read counts as one sandbox: it neither
// frees a place nor refuses every admission.
func TestAdmitCountsCorruptClaim(t *testing.T) {
	root := t.TempDir()
	s := service.New(root, &fuzztest.NoEngines{}, service.WithAdmission(admission.New(root, 2)))
	if err := os.MkdirAll(filepath.Join(root, "claims"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "claims", "sb-0123456789abcdef0123.json"), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	list, err := s.Sandboxes()
	if err != nil || len(list) != 1 || list[0].State != lifecycle.Orphaned || !strings.Contains(list[0].Error, "corrupt") {
		t.Errorf("listed %+v, %v; want the record orphaned, saying it is corrupt", list, err)
	}
	release, err := s.Admit()
	if err != nil {
		t.Fatalf("an admission beside a corrupt claim record, under 2: %v", err)
	}
	defer release()
	var over *admission.OverLimitError
	if r, err := s.Admit(); !errors.As(err, &over) || over.Live != 2 {
		if r != nil {
			r()
		}
		t.Errorf("a second admission under 2: %v; want the corrupt record counted", err)
	}
}
