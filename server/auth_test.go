package server

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"

	pb "atoll/server/inferencepb"
)

// doAuth is do with an Authorization header ("" sends none).
func doAuth(t *testing.T, c *http.Client, method, url, body, auth string) reply {
	t.Helper()
	var rd *strings.Reader
	if body != "" {
		rd = strings.NewReader(body)
	} else {
		rd = strings.NewReader("")
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return reply{code: resp.StatusCode, hdr: resp.Header}
}

func TestRestrictedHTTP(t *testing.T) {
	leakCheck(t)
	ts, c := apiServer(t, newFakeEngine(), Options{
		MetricsHandler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok\n")) }),
		Restricted: []Restriction{
			{Groups: []string{GroupJobs, GroupMetrics}, Token: "s3cret-jobs"},
			{Groups: []string{GroupJobs}, Token: "second-token"},
		},
	})
	job := `{"model":"echo","batch":1,"iterations":3}`
	for _, tc := range []struct {
		method, path, body, auth string
		want                     int
	}{
		{"POST", "/v2/jobs", job, "", http.StatusUnauthorized},
		{"POST", "/v2/jobs", job, "Bearer wrong", http.StatusForbidden},
		{"POST", "/v2/jobs", job, "Basic czNjcmV0LWpvYnM=", http.StatusUnauthorized},
		{"POST", "/v2/jobs", job, "Bearer s3cret-jobs", http.StatusCreated},
		{"POST", "/v2/jobs", job, "bearer second-token", http.StatusCreated},
		{"GET", "/v2/jobs", "", "", http.StatusUnauthorized},
		{"GET", "/v2/jobs/job-1", "", "Bearer s3cret-jobs", http.StatusOK},
		{"DELETE", "/v2/jobs/job-1", "", "", http.StatusUnauthorized},
		{"GET", "/metrics", "", "", http.StatusUnauthorized},
		{"GET", "/metrics", "", "Bearer second-token", http.StatusForbidden},
		{"GET", "/metrics", "", "Bearer s3cret-jobs", http.StatusOK},
		// Groups nobody restricted stay open.
		{"POST", "/v2/models/echo/infer", goodInfer, "", http.StatusOK},
		{"GET", "/v2", "", "", http.StatusOK},
		{"GET", "/v2/health/ready", "", "", http.StatusOK},
	} {
		r := doAuth(t, c, tc.method, ts.URL+tc.path, tc.body, tc.auth)
		if r.code != tc.want {
			t.Errorf("%s %s (auth %q): %d, want %d", tc.method, tc.path, tc.auth, r.code, tc.want)
		}
		if r.code == http.StatusUnauthorized && !strings.HasPrefix(r.hdr.Get("WWW-Authenticate"), "Bearer") {
			t.Errorf("%s %s: 401 without a Bearer challenge: %v", tc.method, tc.path, r.hdr)
		}
	}
}

// TestRestrictedHealthStaysOpen: with every group restricted, probes still
// reach the health endpoints and everything else asks for the token.
func TestRestrictedHealthStaysOpen(t *testing.T) {
	leakCheck(t)
	ts, c := apiServer(t, newFakeEngine(), Options{Restricted: []Restriction{{Groups: APIGroups, Token: "tok"}}})
	for _, p := range []string{"/v2/health/live", "/v2/health/ready", "/v2/models/echo/ready", "/v2/models/echo/versions/1/ready"} {
		if r := doAuth(t, c, "GET", ts.URL+p, "", ""); r.code != http.StatusOK {
			t.Errorf("GET %s: %d, want 200 without a token", p, r.code)
		}
	}
	for _, p := range []string{"/v2", "/v2/models", "/v2/models/echo", "/v2/models/echo/versions/1"} {
		if r := doAuth(t, c, "GET", ts.URL+p, "", ""); r.code != http.StatusUnauthorized {
			t.Errorf("GET %s: %d, want 401", p, r.code)
		}
	}
	if r := doAuth(t, c, "POST", ts.URL+"/v2/models/echo/versions/1/infer", goodInfer, ""); r.code != http.StatusUnauthorized {
		t.Errorf("infer: %d, want 401", r.code)
	}
	if r := doAuth(t, c, "POST", ts.URL+"/v2/models/echo/infer", goodInfer, "Bearer tok"); r.code != http.StatusOK {
		t.Errorf("infer with the token: %d, want 200", r.code)
	}
}

func TestRestrictedGRPC(t *testing.T) {
	leakCheck(t)
	cl, _ := grpcAPI(t, newFakeEngine(), Options{Restricted: []Restriction{{Groups: []string{GroupInference}, Token: "tok"}}})
	ctx := context.Background()
	_, err := cl.ModelInfer(ctx, goodGRPC())
	wantCode(t, "infer without a token", err, codes.Unauthenticated, "authorization")
	_, err = cl.ModelInfer(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer nope"), goodGRPC())
	wantCode(t, "infer with a wrong token", err, codes.PermissionDenied)
	if _, err := cl.ModelInfer(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer tok"), goodGRPC()); err != nil {
		t.Errorf("infer with the token: %v", err)
	}
	if _, err := cl.ServerLive(ctx, &pb.ServerLiveRequest{}); err != nil {
		t.Errorf("ServerLive must stay open: %v", err)
	}
	if _, err := cl.ServerMetadata(ctx, &pb.ServerMetadataRequest{}); err != nil {
		t.Errorf("metadata is not restricted here: %v", err)
	}
}

func TestRestrictionsFromConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "jobs.token")
	os.WriteFile(file, []byte("  from-file\n"), 0o600)
	empty := filepath.Join(dir, "empty.token")
	os.WriteFile(empty, []byte("\n"), 0o600)
	t.Setenv("ATOLL_TEST_TOKEN", "from-env")
	cfg := DefaultConfig()
	cfg.Restricted = []RestrictedConfig{{Groups: []string{"jobs"}, TokenFile: file}, {Groups: []string{"inference", "metrics"}, TokenEnv: "ATOLL_TEST_TOKEN"}}
	rs, err := cfg.Restrictions()
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].Token != "from-file" || rs[1].Token != "from-env" {
		t.Errorf("restrictions %+v", rs)
	}
	for _, tc := range []struct {
		r    RestrictedConfig
		want string
	}{
		{RestrictedConfig{Groups: []string{"admin"}, TokenEnv: "ATOLL_TEST_TOKEN"}, `unknown API group "admin"`},
		{RestrictedConfig{TokenEnv: "ATOLL_TEST_TOKEN"}, "name at least one"},
		{RestrictedConfig{Groups: []string{"jobs"}}, "exactly one of token_file and token_env"},
		{RestrictedConfig{Groups: []string{"jobs"}, TokenFile: file, TokenEnv: "ATOLL_TEST_TOKEN"}, "exactly one"},
		{RestrictedConfig{Groups: []string{"jobs"}, TokenEnv: "ATOLL_TEST_UNSET_VARIABLE"}, "is not set"},
		{RestrictedConfig{Groups: []string{"jobs"}, TokenFile: empty}, "token is empty"},
		{RestrictedConfig{Groups: []string{"jobs"}, TokenFile: filepath.Join(dir, "missing")}, "token_file"},
	} {
		c := DefaultConfig()
		c.Restricted = []RestrictedConfig{tc.r}
		_, err := c.Restrictions()
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want ErrConfig naming %q", tc.r, err, tc.want)
		}
	}
	yml := "restricted:\n  - groups: [jobs, metrics]\n    token_env: ATOLL_TEST_TOKEN\nmax_active_jobs: 3\nmodels:\n  - name: resnet50\n"
	pc, err := ParseConfig(strings.NewReader(yml), "atoll.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(pc.Restricted) != 1 || pc.Restricted[0].TokenEnv != "ATOLL_TEST_TOKEN" || pc.MaxActiveJobs != 3 {
		t.Errorf("parsed %+v", pc)
	}
	if _, err := ParseConfig(strings.NewReader("restricted:\n  - groups: [everything]\n    token_env: X\nmodels:\n  - name: resnet50\n"), "atoll.yaml"); err == nil || !strings.Contains(err.Error(), "restricted[0].groups") {
		t.Errorf("bad group in YAML: %v", err)
	}
	if _, err := ParseConfig(strings.NewReader("tls_cert: a.pem\nmodels:\n  - name: resnet50\n"), "atoll.yaml"); err == nil || !strings.Contains(err.Error(), "tls_key") {
		t.Errorf("tls_cert without tls_key: %v", err)
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key and returns
// their paths and a pool that trusts the certificate.
func selfSigned(t *testing.T) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "atoll test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestDaemonTLSAndTokens: the daemon serves HTTPS with the configured
// certificate and applies the configured restrictions.
func TestDaemonTLSAndTokens(t *testing.T) {
	leakCheck(t)
	cert, key, pool := selfSigned(t)
	t.Setenv("ATOLL_TEST_JOBS_TOKEN", "jobs-token")
	cfg := testConfig()
	cfg.TLSCert, cfg.TLSKey = cert, key
	cfg.Restricted = []RestrictedConfig{{Groups: []string{GroupJobs}, TokenEnv: "ATOLL_TEST_JOBS_TOKEN"}}
	url, _, _ := daemon(t, newFakeEngine(), cfg)
	url = "https://" + strings.TrimPrefix(url, "http://")
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 10 * time.Second}
	t.Cleanup(c.CloseIdleConnections)
	if r := doAuth(t, c, "GET", url+"/v2/health/live", "", ""); r.code != http.StatusOK {
		t.Errorf("health over TLS: %d", r.code)
	}
	if r := doAuth(t, c, "GET", url+"/v2/jobs", "", ""); r.code != http.StatusUnauthorized {
		t.Errorf("jobs without the token: %d, want 401", r.code)
	}
	if r := doAuth(t, c, "GET", url+"/v2/jobs", "", "Bearer jobs-token"); r.code != http.StatusOK {
		t.Errorf("jobs with the token: %d, want 200", r.code)
	}
}

// TestDaemonRefusesBadTokenConfig: an unset token variable stops the
// daemon before it serves, naming the variable.
func TestDaemonRefusesBadTokenConfig(t *testing.T) {
	cfg := testConfig()
	cfg.Restricted = []RestrictedConfig{{Groups: []string{GroupJobs}, TokenEnv: "ATOLL_TEST_NEVER_SET"}}
	err := Run(context.Background(), cfg, newFakeEngine())
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), "ATOLL_TEST_NEVER_SET") {
		t.Errorf("Run: %v, want ErrConfig naming the variable", err)
	}
}

func TestTooManyJobsStatus(t *testing.T) {
	err := fmt.Errorf("%w: 64 jobs", ErrTooManyJobs)
	if statusOf(err) != http.StatusTooManyRequests || grpcCode(err) != codes.ResourceExhausted {
		t.Errorf("ErrTooManyJobs: HTTP %d, gRPC %v; want 429 and ResourceExhausted", statusOf(err), grpcCode(err))
	}
	rec := httptest.NewRecorder()
	h := NewHandler(newFakeEngine(), Options{})
	h.writeError(rec, httptest.NewRequest("POST", "/v2/jobs", nil), err)
	if rec.Code != http.StatusTooManyRequests || rec.Header().Get("Retry-After") == "" {
		t.Errorf("written: %d, Retry-After %q", rec.Code, rec.Header().Get("Retry-After"))
	}
}
