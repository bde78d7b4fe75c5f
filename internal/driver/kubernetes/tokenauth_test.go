package kubernetes

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base32"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestRegistryTokenAuth pushes, reads and deletes an image as the driver
// does against a real distribution registry (Debian's docker-registry)
// that takes only Bearer tokens, as cloud registries do: a token server
// of the test's own on loopback signs them (ES256, its key in the
// registry's rootcertbundle) for the user and password the driver gives,
// with the scopes the registry's challenges ask. A wrong password gets no
// token, and the registry refuses a call with none.
func TestRegistryTokenAuth(t *testing.T) {
	t.Parallel()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		testenv.SkipOrFail(t, "needs Debian's docker-registry (scripts/k8s up installs it): %v", err)
	}
	ts := newTokenServer(t, "robot", "secret")
	dir := t.TempDir()
	addr := freeLoopback(t)
	cfg := fmt.Sprintf(`version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
http:
  addr: %s
auth:
  token:
    realm: %s/token
    service: %s
    issuer: %s
    rootcertbundle: %s
`, filepath.Join(dir, "storage"), addr, ts.URL, tokenService, tokenIssuer, ts.certFile)
	cfgFile := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := exec.Command(bin, "serve", cfgFile)
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized && strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer ") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the registry did not ask for a token within 30 s: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}

	reg, err := newRegistry(addr, "http://"+addr)
	if err != nil {
		t.Fatal(err)
	}
	user, pass := "robot", "secret"
	reg.creds = func(context.Context) (string, string, error) { return user, pass, nil }
	ctx := t.Context()
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	tw.WriteHeader(&tar.Header{Name: "etc/mark", Mode: 0o644, Size: 4, Typeflag: tar.TypeReg})
	tw.Write([]byte("mark"))
	tw.Close()
	img := imageConfig{Created: time.Now().UTC(), OS: "linux", Architecture: "amd64"}
	if err := reg.pushImage(ctx, "hotcell/snapshot", "tok-1", &layer, DefaultMaxImageBytes, img, nil); err != nil {
		t.Fatalf("push through token auth: %v\nregistry:\n%s", err, logs.String())
	}
	d, err := reg.manifestDigest(ctx, "hotcell/snapshot", "tok-1")
	if err != nil || !strings.HasPrefix(d, "sha256:") {
		t.Fatalf("the pushed manifest: %q, %v", d, err)
	}
	if err := reg.deleteImage(ctx, "hotcell/snapshot", "tok-1"); err != nil {
		t.Fatalf("delete through token auth: %v\nregistry:\n%s", err, logs.String())
	}
	if _, err := reg.manifestDigest(ctx, "hotcell/snapshot", "tok-1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the manifest after its delete: got %v, want not found", err)
	}
	// The token server saw what the registry's challenges asked: pull and
	// push for the push, delete for the delete.
	for _, want := range []string{"repository:hotcell/snapshot:push,pull", "repository:hotcell/snapshot:delete"} {
		if !ts.asked(want) {
			t.Errorf("no token asked for scope %q; asked: %q", want, ts.scopes())
		}
	}

	// Without the right password: no token, and the push is refused.
	bad, err := newRegistry(addr, "http://"+addr)
	if err != nil {
		t.Fatal(err)
	}
	user, pass = "robot", "wrong"
	bad.creds = reg.creds
	layer.Reset()
	tw = tar.NewWriter(&layer)
	tw.Close()
	err = bad.pushImage(ctx, "hotcell/snapshot", "tok-2", &layer, DefaultMaxImageBytes, img, nil)
	if err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a push with a wrong password: got %v, want the token server's 401", err)
	}
	// The registry checks the tokens itself: one for another service, or
	// with its signature changed, is refused; the same token whole is
	// taken.
	good := ts.sign(t, "robot", "repository:hotcell/snapshot:pull", tokenService)
	for _, tc := range []struct {
		what, token string
		want        int
	}{
		{"a token for another service", ts.sign(t, "robot", "repository:hotcell/snapshot:pull", "another-service"), http.StatusUnauthorized},
		{"a token whose signature was changed", good[:len(good)-4] + "AAAA", http.StatusUnauthorized},
		{"the token", good, http.StatusNotFound}, // the repository is empty now
	} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v2/hotcell/snapshot/manifests/tok-1", nil)
		req.Header.Set("Authorization", "Bearer "+tc.token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %s, want %d", tc.what, resp.Status, tc.want)
		}
	}
}

const (
	tokenService = "hotcell-test-registry"
	tokenIssuer  = "hotcell-test-issuer"
)

// tokenServer issues registry tokens (the distribution token
// specification) to one user, for every scope asked.
type tokenServer struct {
	*httptest.Server
	key      *ecdsa.PrivateKey
	kid      string
	certFile string
	mu       sync.Mutex
	seen     []string
}

func newTokenServer(t *testing.T, user, password string) *tokenServer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: tokenIssuer},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certFile := filepath.Join(t.TempDir(), "token-ca.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	ts := &tokenServer{key: key, kid: libtrustKeyID(t, &key.PublicKey), certFile: certFile}
	ts.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != user || p != password || r.URL.Query().Get("service") != tokenService {
			http.Error(w, "bad credentials", http.StatusUnauthorized)
			return
		}
		scopes := r.URL.Query()["scope"]
		ts.mu.Lock()
		ts.seen = append(ts.seen, scopes...)
		ts.mu.Unlock()
		tok := ts.sign(t, u, strings.Join(scopes, " "), tokenService)
		json.NewEncoder(w).Encode(map[string]any{"token": tok, "expires_in": 300})
	}))
	t.Cleanup(ts.Close)
	return ts
}

// asked says whether a token was asked for scope, its actions in any
// order.
func (ts *tokenServer) asked(scope string) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	norm := func(s string) string {
		i := strings.LastIndexByte(s, ':')
		if i < 0 {
			return s
		}
		acts := strings.Split(s[i+1:], ",")
		slices.Sort(acts)
		return s[:i+1] + strings.Join(acts, ",")
	}
	for _, s := range ts.seen {
		if norm(s) == norm(scope) {
			return true
		}
	}
	return false
}

func (ts *tokenServer) scopes() []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]string(nil), ts.seen...)
}

// sign makes a token for sub with the access the space-separated scopes
// (type:name:actions) name, for audience aud.
func (ts *tokenServer) sign(t *testing.T, sub, scopes, aud string) string {
	type access struct {
		Type    string   `json:"type"`
		Name    string   `json:"name"`
		Actions []string `json:"actions"`
	}
	var acc []access
	for _, s := range strings.Fields(scopes) {
		parts := strings.Split(s, ":")
		if len(parts) < 3 {
			continue
		}
		acc = append(acc, access{parts[0], strings.Join(parts[1:len(parts)-1], ":"), strings.Split(parts[len(parts)-1], ",")})
	}
	now := time.Now()
	header, _ := json.Marshal(map[string]string{"typ": "JWT", "alg": "ES256", "kid": ts.kid})
	claims, _ := json.Marshal(map[string]any{
		"iss": tokenIssuer, "sub": sub, "aud": aud, "access": acc,
		"iat": now.Unix(), "nbf": now.Add(-time.Minute).Unix(), "exp": now.Add(5 * time.Minute).Unix(),
		"jti": fmt.Sprint(now.UnixNano()),
	})
	enc := base64.RawURLEncoding
	input := enc.EncodeToString(header) + "." + enc.EncodeToString(claims)
	sum := sha256.Sum256([]byte(input))
	r, s, err := ecdsa.Sign(rand.Reader, ts.key, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return input + "." + enc.EncodeToString(sig)
}

// libtrustKeyID is the key ID the registry gives a key of its
// rootcertbundle (docker/libtrust): the SHA-256 of its DER public key,
// cut to 240 bits, in base32, in groups of four.
func libtrustKeyID(t *testing.T, pub *ecdsa.PublicKey) string {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	s := strings.TrimRight(base32.StdEncoding.EncodeToString(sum[:30]), "=")
	var groups []string
	for i := 0; i < len(s); i += 4 {
		groups = append(groups, s[i:min(i+4, len(s))])
	}
	return strings.Join(groups, ":")
}

func freeLoopback(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
