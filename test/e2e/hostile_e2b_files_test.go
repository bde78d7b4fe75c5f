package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/e2b"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// envdClient speaks to one daemon's envd routes as the e2b SDK does, with
// raw HTTP: the credentials are the test's to choose.
type envdClient struct {
	t    *testing.T
	base string // http://<addr>/e2b
	srv  *e2b.Server
}

func newEnvdClient(t *testing.T, d *testdaemon.Daemon) *envdClient {
	t.Helper()
	secret, _, err := config.EnsureToken(filepath.Join(d.DataDir, "e2b-secret"))
	if err != nil {
		t.Fatalf("read the daemon's e2b secret: %v", err)
	}
	return &envdClient{t: t, base: "http://" + d.Addr + "/e2b", srv: e2b.New(e2b.Options{Secret: []byte(secret)})}
}

// sign makes the SDK's signature of a signed URL under token.
func sign(token, p, op, user string, exp *int64) string {
	raw := p + ":" + op + ":" + user + ":" + token
	if exp != nil {
		raw += ":" + strconv.FormatInt(*exp, 10)
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

// do sends a request for sandbox id with token (none if empty).
func (c *envdClient) do(method, pathQuery, id, token, contentType string, body io.Reader) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.base+pathQuery, body)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("E2b-Sandbox-Id", id)
	if token != "" {
		req.Header.Set("X-Access-Token", token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
		if contentType == "application/connect+json" {
			req.Header.Set("Connect-Protocol-Version", "1")
		}
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, pathQuery, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, data
}

// rpc makes a unary Connect call.
func (c *envdClient) rpc(method, id, token string, in any) (int, []byte) {
	c.t.Helper()
	b, _ := json.Marshal(in)
	return c.do("POST", "/filesystem.Filesystem/"+method, id, token, "application/json", bytes.NewReader(b))
}

// envelope frames a streaming request.
func envelope(v any) []byte {
	b, _ := json.Marshal(v)
	out := make([]byte, 5, 5+len(b))
	binary.BigEndian.PutUint32(out[1:], uint32(len(b)))
	return append(out, b...)
}

// TestHostileE2BFiles attacks envd's file surface of one sandbox from
// another: its envd token on every filesystem call and on /files, signed
// URLs that are forged, expired, for another path, for reading used to
// write, or signed with its own token, watcher ids of the victim, and a
// flood of watchers. Every attempt is refused, the victim's file is as it
// was, and the daemon and the neighbour still work.
func TestHostileE2BFiles(t *testing.T) {
	t.Parallel()
	d := sharedDaemon(t)
	c := newEnvdClient(t, d)
	image := testenv.BaseImage(t)
	victim := newSandbox(t, d, client.CreateSandboxRequest{Image: image})
	attacker := newSandbox(t, d, client.CreateSandboxRequest{Image: image})
	mustOK(t, run(t, d, victim.ID, "mkdir -p /srv && echo secret > /srv/secret.txt"), "plant the victim's file")
	vTok, aTok := c.srv.EnvdToken(victim.ID), c.srv.EnvdToken(attacker.ID)

	// Positive controls: the right token and a right signature work, so
	// the refusals below are refusals of the credentials.
	if st, body := c.do("GET", "/files?path=/srv/secret.txt", victim.ID, vTok, "", nil); st != 200 || string(body) != "secret\n" {
		t.Fatalf("read with the victim's token: %d %s", st, body)
	}
	good := url.Values{"path": {"/srv/secret.txt"}, "signature": {sign(vTok, "/srv/secret.txt", "read", "", nil)}}
	if st, body := c.do("GET", "/files?"+good.Encode(), victim.ID, "", "", nil); st != 200 || string(body) != "secret\n" {
		t.Fatalf("read with a good signature: %d %s", st, body)
	}

	// The attacker's token, naming the victim.
	for _, m := range []struct {
		method string
		in     any
	}{
		{"Stat", map[string]any{"path": "/srv/secret.txt"}},
		{"ListDir", map[string]any{"path": "/srv", "depth": 3}},
		{"MakeDir", map[string]any{"path": "/srv/planted"}},
		{"Move", map[string]any{"source": "/srv/secret.txt", "destination": "/tmp/stolen.txt"}},
		{"Remove", map[string]any{"path": "/srv/secret.txt"}},
		{"CreateWatcher", map[string]any{"path": "/srv"}},
	} {
		if st, body := c.rpc(m.method, victim.ID, aTok, m.in); st != 401 || !strings.Contains(string(body), `"unauthenticated"`) {
			t.Errorf("%s with another sandbox's token: %d %s, want 401 unauthenticated", m.method, st, body)
		}
	}
	if st, body := c.do("POST", "/filesystem.Filesystem/WatchDir", victim.ID, aTok, "application/connect+json", bytes.NewReader(envelope(map[string]any{"path": "/srv"}))); st != 401 {
		t.Errorf("WatchDir with another sandbox's token: %d %s", st, body)
	}
	if st, body := c.do("GET", "/files?path=/srv/secret.txt", victim.ID, aTok, "", nil); st != 401 || bytes.Contains(body, []byte("secret\n")) {
		t.Errorf("GET /files with another sandbox's token: %d %s", st, body)
	}
	if st, body := c.do("POST", "/files?path=/srv/secret.txt", victim.ID, aTok, "application/octet-stream", strings.NewReader("owned")); st != 401 {
		t.Errorf("POST /files with another sandbox's token: %d %s", st, body)
	}

	// Signed URLs that must not open anything.
	past := time.Now().Add(-time.Minute).Unix()
	soon := time.Now().Add(time.Hour).Unix()
	forged := []struct {
		name, method string
		q            url.Values
	}{
		{"made up", "GET", url.Values{"path": {"/srv/secret.txt"}, "signature": {"v1_" + strings.Repeat("A", 43)}}},
		{"signed with the attacker's token", "GET", url.Values{"path": {"/srv/secret.txt"}, "signature": {sign(aTok, "/srv/secret.txt", "read", "", nil)}}},
		{"expired", "GET", url.Values{"path": {"/srv/secret.txt"}, "signature": {sign(vTok, "/srv/secret.txt", "read", "", &past)}, "signature_expiration": {strconv.FormatInt(past, 10)}}},
		{"expiration pushed back", "GET", url.Values{"path": {"/srv/secret.txt"}, "signature": {sign(vTok, "/srv/secret.txt", "read", "", &past)}, "signature_expiration": {strconv.FormatInt(soon, 10)}}},
		{"another path", "GET", url.Values{"path": {"/etc/shadow"}, "signature": {sign(vTok, "/srv/secret.txt", "read", "", nil)}}},
		{"another user", "GET", url.Values{"path": {"/srv/secret.txt"}, "username": {"root"}, "signature": {sign(vTok, "/srv/secret.txt", "read", "", nil)}}},
		{"read used to write", "POST", url.Values{"path": {"/srv/secret.txt"}, "signature": {sign(vTok, "/srv/secret.txt", "read", "", nil)}}},
	}
	for _, f := range forged {
		var body io.Reader
		ct := ""
		if f.method == "POST" {
			body, ct = strings.NewReader("owned"), "application/octet-stream"
		}
		if st, out := c.do(f.method, "/files?"+f.q.Encode(), victim.ID, "", ct, body); st != 401 || bytes.Contains(out, []byte("secret\n")) {
			t.Errorf("signature %s: %d %s, want 401", f.name, st, out)
		}
	}
	// The victim's good signature presented for the attacker's sandbox.
	if st, out := c.do("GET", "/files?"+good.Encode(), attacker.ID, "", "", nil); st != 401 {
		t.Errorf("the victim's signature on the attacker's sandbox: %d %s", st, out)
	}

	// Watchers: the victim's watcher id is not the attacker's to read, and
	// a flood of watchers stops at the limit.
	st, body := c.rpc("CreateWatcher", victim.ID, vTok, map[string]any{"path": "/srv"})
	var cw struct {
		WatcherID string `json:"watcherId"`
	}
	if err := json.Unmarshal(body, &cw); st != 200 || err != nil || cw.WatcherID == "" {
		t.Fatalf("CreateWatcher: %d %s", st, body)
	}
	if st, body := c.rpc("GetWatcherEvents", attacker.ID, aTok, map[string]any{"watcherId": cw.WatcherID}); st != 404 {
		t.Errorf("the victim's watcher read from the attacker's sandbox: %d %s, want 404", st, body)
	}
	if st, body := c.rpc("RemoveWatcher", attacker.ID, aTok, map[string]any{"watcherId": cw.WatcherID}); st != 404 {
		t.Errorf("the victim's watcher removed from the attacker's sandbox: %d %s, want 404", st, body)
	}
	mustOK(t, run(t, d, victim.ID, "touch /srv/new.txt"), "change the watched directory")
	var events []map[string]string
	for deadline := time.Now().Add(10 * time.Second); len(events) == 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		st, body := c.rpc("GetWatcherEvents", victim.ID, vTok, map[string]any{"watcherId": cw.WatcherID})
		var ge struct {
			Events []map[string]string `json:"events"`
		}
		if err := json.Unmarshal(body, &ge); st != 200 || err != nil {
			t.Fatalf("GetWatcherEvents: %d %s", st, body)
		}
		events = ge.Events
	}
	if len(events) == 0 || events[0]["name"] != "new.txt" || events[0]["type"] != "EVENT_TYPE_CREATE" {
		t.Errorf("watcher events %v, want new.txt created", events)
	}
	if st, body := c.rpc("RemoveWatcher", victim.ID, vTok, map[string]any{"watcherId": cw.WatcherID}); st != 200 {
		t.Errorf("RemoveWatcher: %d %s", st, body)
	}
	if st, _ := c.rpc("GetWatcherEvents", victim.ID, vTok, map[string]any{"watcherId": cw.WatcherID}); st != 404 {
		t.Errorf("GetWatcherEvents after RemoveWatcher: %d, want 404", st)
	}
	var flood []string
	refused := false
	for range 40 {
		st, body := c.rpc("CreateWatcher", attacker.ID, aTok, map[string]any{"path": "/tmp"})
		if st == 200 {
			var w struct {
				WatcherID string `json:"watcherId"`
			}
			_ = json.Unmarshal(body, &w)
			flood = append(flood, w.WatcherID)
			continue
		}
		if st != 429 || !strings.Contains(string(body), "resource_exhausted") {
			t.Errorf("watcher %d: %d %s, want 429 resource_exhausted", len(flood)+1, st, body)
		}
		refused = true
		break
	}
	if !refused {
		t.Errorf("%d watchers made by one sandbox, none refused", len(flood))
	}
	for _, id := range flood {
		c.rpc("RemoveWatcher", attacker.ID, aTok, map[string]any{"watcherId": id})
	}
	// The victim could still make one: the limit is per sandbox.
	if st, body := c.rpc("CreateWatcher", victim.ID, vTok, map[string]any{"path": "/srv"}); st != 200 {
		t.Errorf("the victim's watcher after the attacker's flood: %d %s", st, body)
	}

	// A page planted by the sandbox is served as bytes, not as a document
	// of the daemon's origin.
	mustOK(t, run(t, d, attacker.ID, "echo '<script>alert(1)</script>' > /tmp/page.html"), "plant a page")
	req, _ := http.NewRequestWithContext(t.Context(), "GET", c.base+"/files?path=/tmp/page.html", nil)
	req.Header.Set("E2b-Sandbox-Id", attacker.ID)
	req.Header.Set("X-Access-Token", aTok)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ct, csp := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Security-Policy"); ct != "application/octet-stream" || csp != "sandbox" || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Errorf("a planted page is served as %q with CSP %q", ct, csp)
	}

	// Nothing changed, and everyone still works.
	if out := mustOK(t, run(t, d, victim.ID, "cat /srv/secret.txt; ls /srv /tmp/stolen.txt 2>&1 || true"), "check the victim"); !strings.HasPrefix(out, "secret\n") || strings.Contains(out, "planted") || strings.Contains(out, "owned") || !strings.Contains(out, "No such file") {
		t.Errorf("the victim after the attack: %q", out)
	}
	mustOK(t, run(t, d, attacker.ID, "true"), "exec in the attacker's sandbox after the attack")
	if st, body := c.do("GET", "/files?path=/srv/secret.txt", victim.ID, vTok, "", nil); st != 200 || string(body) != "secret\n" {
		t.Errorf("read with the victim's token after the attack: %d %s", st, body)
	}
}

// patternReader yields n bytes of a repeating pattern without holding them.
type patternReader struct{ n, off int64 }

func (p *patternReader) Read(b []byte) (int, error) {
	if p.off >= p.n {
		return 0, io.EOF
	}
	k := min(int64(len(b)), p.n-p.off)
	for i := range k {
		b[i] = byte((p.off + i) * 31 >> 3)
	}
	p.off += k
	return int(k), nil
}

// TestE2BFilesLargeUpload streams 320 MiB through envd's /files, up (a raw
// octet-stream body) and down, on a daemon of its own whose memory is
// measured: the file must never be held whole.
func TestE2BFilesLargeUpload(t *testing.T) {
	t.Parallel()
	d := testdaemon.Start(t) // its own: its memory is measured
	t.Cleanup(d.Close)
	c := newEnvdClient(t, d)
	sb := newSandbox(t, d, client.CreateSandboxRequest{Image: testenv.BaseImage(t)})
	tok := c.srv.EnvdToken(sb.ID)
	// Warm up the paths the transfer takes.
	c.do("POST", "/files?path=/tmp/warm.bin", sb.ID, tok, "application/octet-stream", &patternReader{n: 1 << 20})
	c.do("GET", "/files?path=/tmp/warm.bin", sb.ID, tok, "", nil)
	base := daemonMemKiB(t, d, "VmRSS")
	const size = 320 << 20

	want := sha256.New()
	_, _ = io.Copy(want, &patternReader{n: size})
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", c.base+"/files?path=/tmp/big.bin", &patternReader{n: size})
	req.ContentLength = size
	req.Header.Set("E2b-Sandbox-Id", sb.ID)
	req.Header.Set("X-Access-Token", tok)
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"/tmp/big.bin"`) {
		t.Fatalf("upload: %d %s", resp.StatusCode, body)
	}
	up := daemonMemKiB(t, d, "VmRSS")

	req, _ = http.NewRequestWithContext(ctx, "GET", c.base+"/files?path=/tmp/big.bin", nil)
	req.Header.Set("E2b-Sandbox-Id", sb.ID)
	req.Header.Set("X-Access-Token", tok)
	req.Header.Set("Accept-Encoding", "identity")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got := sha256.New()
	n, err := io.Copy(got, resp.Body)
	resp.Body.Close()
	if err != nil || n != size || resp.StatusCode != 200 {
		t.Fatalf("download: status %d, %d bytes, %v", resp.StatusCode, n, err)
	}
	if hex.EncodeToString(got.Sum(nil)) != hex.EncodeToString(want.Sum(nil)) {
		t.Errorf("the file read back differs from what was written")
	}
	down := daemonMemKiB(t, d, "VmRSS")
	peak := daemonMemKiB(t, d, "VmHWM")
	t.Logf("daemon RSS: %d KiB before, %d after the upload, %d after the download, peak %d", base, up, down, peak)
	const maxGrowthKiB = 96 << 10 // well under the file's 320 MiB
	if peak > base+maxGrowthKiB {
		t.Errorf("daemon RSS %d KiB after moving %d MiB, want at most %d + %d KiB", peak, size>>20, base, maxGrowthKiB)
	}
	if out := mustOK(t, run(t, d, sb.ID, "stat -c %s /tmp/big.bin"), "size in the sandbox"); strings.TrimSpace(out) != fmt.Sprint(size) {
		t.Errorf("size in the sandbox %q, want %d", out, size)
	}
}
