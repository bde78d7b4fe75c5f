package kubernetes

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/hotcell/hotcell/internal/backup"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/templates"
)

func TestMade(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ref, repo, tag string
	}{
		{"hotcell/snapshot:sb-1-sn-2", "hotcell/snapshot", "sb-1-sn-2"},
		{"docker.io/hotcell/snapshot:x", "hotcell/snapshot", "x"},
		{"hotcell-tpl/saved:3-b1", "hotcell-tpl/saved", "3-b1"},
		{"hotcell/snapshot", "", ""},                        // no tag
		{"hotcell/snapshotter:x", "", ""},                   // another repository
		{"hotcell-tpl:x", "", ""},                           // not under hotcell-tpl/
		{"registry.example.com/hotcell/snapshot:x", "", ""}, // a registry of its own
		{"hotcell/snapshot:x@sha256:" + sha64, "", ""},      // pinned by digest
		{"debian:12", "", ""},
		{"Not A Ref", "", ""},
	} {
		repo, tag, ok := made(tc.ref)
		if repo != tc.repo || tag != tc.tag || ok != (tc.repo != "") {
			t.Errorf("made(%q) = %q, %q, %v; want %q, %q", tc.ref, repo, tag, ok, tc.repo, tc.tag)
		}
	}
}

const sha64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestNewRegistry(t *testing.T) {
	t.Parallel()
	r, err := newRegistry("registry.example.com:5000/teams/a/", "")
	if err != nil {
		t.Fatal(err)
	}
	if got := r.ref("hotcell/snapshot", "t"); got != "registry.example.com:5000/teams/a/hotcell/snapshot:t" {
		t.Errorf("ref: %s", got)
	}
	if got := r.url("hotcell/snapshot", "manifests/t"); got != "https://registry.example.com:5000/v2/teams/a/hotcell/snapshot/manifests/t" {
		t.Errorf("url: %s", got)
	}
	r, err = newRegistry("10.96.0.90:5000", "http://127.0.0.1:5055/")
	if err != nil {
		t.Fatal(err)
	}
	if got := r.url("hotcell-tpl/x", "blobs/uploads/"); got != "http://127.0.0.1:5055/v2/hotcell-tpl/x/blobs/uploads/" {
		t.Errorf("url: %s", got)
	}
	for _, bad := range [][2]string{
		{"https://r.example", ""},
		{"/path-only", ""},
		{"r.example/Upper", ""},
		{"r.example", "ftp://r.example"},
		{"r.example", "https://r.example/v2"},
		{"r.example", "http://"},
	} {
		if _, err := newRegistry(bad[0], bad[1]); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("newRegistry(%q, %q): got %v, want invalid", bad[0], bad[1], err)
		}
	}
}

// TestPodForMadeImage: a box of an image hotcell made runs it from the
// registry, pulled when the node lacks it whatever the policy for the
// others; without a registry, and for any other image, the ref and the
// policy are the spec's and the config's.
func TestPodForMadeImage(t *testing.T) {
	t.Parallel()
	with := testDriver(Config{PullPolicy: corev1.PullNever, Registry: "10.96.0.90:5000", RegistryURL: "http://127.0.0.1:5055"})
	without := testDriver(Config{PullPolicy: corev1.PullNever})
	for _, tc := range []struct {
		d           *Driver
		image, want string
		policy      corev1.PullPolicy
	}{
		{with, "hotcell/snapshot:sb-sn", "10.96.0.90:5000/hotcell/snapshot:sb-sn", corev1.PullIfNotPresent},
		{with, "hotcell-tpl/saved:1-b", "10.96.0.90:5000/hotcell-tpl/saved:1-b", corev1.PullIfNotPresent},
		{with, "busybox:latest", "busybox:latest", corev1.PullNever},
		{without, "hotcell/snapshot:sb-sn", "hotcell/snapshot:sb-sn", corev1.PullNever},
	} {
		spec := baseSpec()
		spec.Image = tc.image
		p, err := tc.d.podFor(spec, "")
		if err != nil {
			t.Fatal(err)
		}
		if c := p.Spec.Containers[0]; c.Image != tc.want || c.ImagePullPolicy != tc.policy {
			t.Errorf("image %s (registry %v): container runs %s, %s; want %s, %s", tc.image, tc.d.reg != nil, c.Image, c.ImagePullPolicy, tc.want, tc.policy)
		}
	}
}

// TestMadeReposAreTheDaemons: the repositories the driver keeps in the
// registry are those the daemon names its snapshots and templates in.
func TestMadeReposAreTheDaemons(t *testing.T) {
	t.Parallel()
	for _, ref := range []string{backup.SnapshotRepo + ":sb-sn", templates.Repo + "/name:1-b"} {
		if _, _, ok := made(ref); !ok {
			t.Errorf("%s is the daemon's, but not an image the driver makes", ref)
		}
	}
}

func TestParseChallenge(t *testing.T) {
	t.Parallel()
	scheme, p := parseChallenge(`Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:hotcell/snapshot:pull,push"`)
	if scheme != "Bearer" || p["realm"] != "https://auth.example.com/token" || p["service"] != "registry.example.com" || p["scope"] != "repository:hotcell/snapshot:pull,push" {
		t.Errorf("bearer: %q %q", scheme, p)
	}
	scheme, p = parseChallenge(`Basic realm="hotcell-k8s"`)
	if scheme != "Basic" || p["realm"] != "hotcell-k8s" {
		t.Errorf("basic: %q %q", scheme, p)
	}
	scheme, p = parseChallenge(`Bearer realm=unquoted, error="invalid_token"`)
	if scheme != "Bearer" || p["realm"] != "unquoted" || p["error"] != "invalid_token" {
		t.Errorf("unquoted: %q %q", scheme, p)
	}
	if _, p = parseChallenge(`Bearer realm="open`); len(p) != 0 {
		t.Errorf("an open quote: %q", p)
	}
}

func TestRepoOf(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"/v2/hotcell/snapshot/blobs/uploads/":      "hotcell/snapshot",
		"/v2/teams/a/hotcell-tpl/x/manifests/1-b":  "teams/a/hotcell-tpl/x",
		"/v2/hotcell/snapshot/blobs/uploads/u-1-2": "hotcell/snapshot",
	} {
		if got := repoOf(in); got != want {
			t.Errorf("repoOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func FuzzParseChallenge(f *testing.F) {
	f.Add(`Bearer realm="https://a/token",service="s",scope="repository:x:pull"`)
	f.Fuzz(func(t *testing.T, h string) {
		parseChallenge(h) // a registry's header: any bytes end without a panic
	})
}

// TestTarEnd: a whole tar ends in two zero blocks at a block's end,
// whatever the writes' sizes; one cut short does not; copyTar takes the
// whole one and refuses one cut anywhere.
func TestTarEnd(t *testing.T) {
	t.Parallel()
	var whole bytes.Buffer
	tw := tar.NewWriter(&whole)
	tw.WriteHeader(&tar.Header{Name: "f", Mode: 0o644, Size: 3000, Typeflag: tar.TypeReg})
	tw.Write(bytes.Repeat([]byte{'x'}, 3000))
	tw.Close()
	for _, size := range []int{1, 7, 512, 1000, 4096} {
		for _, cut := range []int{0, 1, 1024} {
			var tl tail
			b := whole.Bytes()[:whole.Len()-cut]
			for len(b) > 0 {
				n := min(size, len(b))
				tl.Write(b[:n])
				b = b[n:]
			}
			if got, want := tl.tarEnd(), cut == 0; got != want {
				t.Errorf("writes of %d, %d bytes cut: tarEnd %v, want %v", size, cut, got, want)
			}
		}
	}
	for _, cut := range []int{0, 1, 512, 1024, 1536, whole.Len() - 512} {
		var out bytes.Buffer
		end := &tail{}
		src := bytes.NewReader(whole.Bytes()[:whole.Len()-cut])
		err := copyTar(&out, io.TeeReader(src, end), end)
		if (err == nil) != (cut == 0) {
			t.Errorf("copyTar of a tar %d bytes short: %v", cut, err)
		}
		if cut == 0 && !bytes.Equal(out.Bytes(), whole.Bytes()) {
			t.Errorf("copyTar changed the tar: %d bytes, want %d", out.Len(), whole.Len())
		}
	}
}

// TestRegistryBearer: a registry with token auth (as cloud registries
// have) answers 401 with a Bearer challenge; the driver gets a token from
// the challenge's realm with its credentials, for the challenge's scope,
// and sends the call again with it; the next call of the repository takes
// the token at once. A realm that refuses the credentials fails the call.
func TestRegistryBearer(t *testing.T) {
	t.Parallel()
	var tokens, calls int
	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || u != "robot" || p != "secret" || r.URL.Query().Get("scope") != "repository:hotcell/snapshot:pull,push" || r.URL.Query().Get("service") != "reg" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		tokens++
		w.Write([]byte(`{"token":"tok-1"}`))
	}))
	defer auth.Close()
	reg := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls++
		if r.Header.Get("Authorization") != "Bearer tok-1" {
			w.Header().Set("WWW-Authenticate", `Bearer realm="`+auth.URL+`/token",service="reg",scope="repository:hotcell/snapshot:pull,push"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.Header().Set("Docker-Content-Digest", "sha256:"+sha64)
		w.WriteHeader(http.StatusOK)
	}))
	defer reg.Close()
	host := strings.TrimPrefix(reg.URL, "http://")
	r, err := newRegistry(host, reg.URL)
	if err != nil {
		t.Fatal(err)
	}
	user, pass := "robot", "secret"
	r.creds = func(context.Context) (string, string, error) { return user, pass, nil }
	for i := range 2 {
		d, err := r.manifestDigest(t.Context(), "hotcell/snapshot", "x")
		if err != nil || d != "sha256:"+sha64 {
			t.Fatalf("call %d: %q, %v", i, d, err)
		}
	}
	if tokens != 1 || calls != 3 {
		t.Errorf("tokens %d, registry calls %d; want 1 token, and one 401 before two calls with it", tokens, calls)
	}
	r2, _ := newRegistry(host, reg.URL)
	user, pass = "robot", "wrong"
	r2.creds = r.creds
	if _, err := r2.manifestDigest(t.Context(), "hotcell/snapshot", "x"); err == nil || !strings.Contains(err.Error(), "401") {
		t.Errorf("a realm refusing the credentials: got %v, want its 401", err)
	}
}
