package e2b

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/errdefs"
)

// The SDK's own signatures (getSignature in e2b 2.51.0, computed with node).
func TestSignatureMatchesSDK(t *testing.T) {
	t.Parallel()
	exp := int64(1700000000)
	for _, tt := range []struct {
		p, op, user string
		exp         *int64
		want        string
	}{
		{"/home/user/a.txt", "read", "", nil, "v1_ZNqG2rk/WBZsunC40ehml5/muvf5TCH6vhs28Z9DZno"},
		{"/home/user/a.txt", "write", "user", &exp, "v1_TNbfyenirtYYKGdU1sT3z4zHvcKaqeswFUNX6ulUT3I"},
	} {
		if got := signature("ea_tok", tt.p, tt.op, tt.user, tt.exp); got != tt.want {
			t.Errorf("signature(%q, %q, %q): got %s, want %s", tt.p, tt.op, tt.user, got, tt.want)
		}
	}
}

func TestVerifySignature(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0)
	later := now.Unix() + 60
	earlier := now.Unix() - 1
	good := signature("tok", "/tmp/a", opRead, "user", &later)
	plain := signature("tok", "/tmp/a", opRead, "", nil)
	for _, tt := range []struct {
		name                    string
		token, p, op, user, sig string
		exp                     string
		hasExp                  bool
		ok                      bool
	}{
		{"valid with expiration", "tok", "/tmp/a", opRead, "user", good, strconv.FormatInt(later, 10), true, true},
		{"valid without expiration", "tok", "/tmp/a", opRead, "", plain, "", false, true},
		{"write with a read signature", "tok", "/tmp/a", opWrite, "user", good, strconv.FormatInt(later, 10), true, false},
		{"another path", "tok", "/tmp/b", opRead, "user", good, strconv.FormatInt(later, 10), true, false},
		{"another user", "tok", "/tmp/a", opRead, "root", good, strconv.FormatInt(later, 10), true, false},
		{"another sandbox's token", "other", "/tmp/a", opRead, "user", good, strconv.FormatInt(later, 10), true, false},
		{"expiration changed", "tok", "/tmp/a", opRead, "user", good, strconv.FormatInt(later+1, 10), true, false},
		{"expiration dropped", "tok", "/tmp/a", opRead, "user", good, "", false, false},
		{"expired", "tok", "/tmp/a", opRead, "user", signature("tok", "/tmp/a", opRead, "user", &earlier), strconv.FormatInt(earlier, 10), true, false},
		{"tampered", "tok", "/tmp/a", opRead, "", plain[:len(plain)-1] + "A", "", false, false},
		{"padded", "tok", "/tmp/a", opRead, "", plain + "=", "", false, false},
		{"bad expiration", "tok", "/tmp/a", opRead, "", plain, "soon", true, false},
		{"empty", "tok", "/tmp/a", opRead, "", "", "", false, false},
	} {
		err := verifySignature(tt.token, tt.p, tt.op, tt.user, tt.sig, tt.exp, tt.hasExp, now)
		if (err == nil) != tt.ok {
			t.Errorf("%s: got %v, want ok=%v", tt.name, err, tt.ok)
		}
		if err != nil && !errors.Is(err, errdefs.ErrUnauthenticated) {
			t.Errorf("%s: error %v is not unauthenticated", tt.name, err)
		}
	}
}

func FuzzVerifySignature(f *testing.F) {
	f.Add("/tmp/a", "user", "v1_abc", "1700000000")
	f.Add("", "", "", "")
	f.Add("a:b", "u:", "v1_"+strings.Repeat("A", 43), "-1")
	f.Fuzz(func(t *testing.T, p, user, sig, exp string) {
		now := time.Unix(1_800_000_000, 0)
		// Whatever comes in, a signature that was not made with the token
		// never verifies...
		if sig != signature("tok", p, opRead, user, nil) && verifySignature("tok", p, opRead, user, sig, "", false, now) == nil {
			t.Fatalf("forged signature %q verified for %q", sig, p)
		}
		_ = verifySignature("tok", p, opWrite, user, sig, exp, true, now)
		// ...and one that was always does, for its own operation only.
		good := signature("tok", p, opWrite, user, nil)
		if err := verifySignature("tok", p, opWrite, user, good, "", false, now); err != nil {
			t.Fatalf("own signature refused: %v", err)
		}
		if verifySignature("tok", p, opRead, user, good, "", false, now) == nil {
			t.Fatalf("a write signature verified for read")
		}
	})
}

// multipartBody builds an upload as the SDK's FormData does: field "file",
// the target path as the filename.
func multipartBody(t testing.TB, files map[string]string, order []string) (string, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, name := range order {
		h := textproto.MIMEHeader{}
		h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename="%s"`, name))
		h.Set("Content-Type", "application/octet-stream")
		pw, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = pw.Write([]byte(files[name]))
	}
	_ = mw.Close()
	return mw.FormDataContentType(), &buf
}

func TestUploadTargetKeepsFullPath(t *testing.T) {
	t.Parallel()
	files := map[string]string{"/tmp/dir/a.txt": "A", "rel/b.txt": "B", "c.txt": "C"}
	order := []string{"/tmp/dir/a.txt", "rel/b.txt", "c.txt"}
	ct, body := multipartBody(t, files, order)
	_, params, _ := strings.Cut(ct, "boundary=")
	mr := multipart.NewReader(body, params)
	var got []string
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		target, ok, err := uploadTarget(part, "")
		if err != nil || !ok {
			t.Fatalf("part: %v %v", ok, err)
		}
		data, _ := io.ReadAll(part)
		if string(data) != files[target] {
			t.Errorf("%s: content %q, want %q", target, data, files[target])
		}
		got = append(got, target)
	}
	if strings.Join(got, ",") != strings.Join(order, ",") {
		t.Errorf("targets %v, want %v", got, order)
	}
	// The path parameter, when given, wins over the filename.
	ct, body = multipartBody(t, files, order[:1])
	_, params, _ = strings.Cut(ct, "boundary=")
	part, err := multipart.NewReader(body, params).NextPart()
	if err != nil {
		t.Fatal(err)
	}
	if target, _, _ := uploadTarget(part, "/other.txt"); target != "/other.txt" {
		t.Errorf("with a path parameter: target %q", target)
	}
}

func TestPartFilename(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		cd, want string
		ok       bool
	}{
		{`form-data; name="file"; filename="/tmp/a b/c.txt"`, "/tmp/a b/c.txt", true},
		{`form-data; name="file"; filename="c.txt"`, "c.txt", true},
		{`form-data; name="file"; filename*=UTF-8''%C3%A9t%C3%A9.txt`, "été.txt", true},
		{`form-data; name="file"`, "", false},
		{`form-data; name="file"; filename=""`, "", false},
		{`garbage;;;`, "", false},
	} {
		got, err := partFilename(tt.cd)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("partFilename(%q) = %q, %v; want %q ok=%v", tt.cd, got, err, tt.want, tt.ok)
		}
	}
}

func FuzzPartFilename(f *testing.F) {
	f.Add(`form-data; name="file"; filename="/tmp/a.txt"`)
	f.Add(`form-data; filename*=UTF-8''%2Fetc%2Fpasswd`)
	f.Add(`form-data; name="file"; filename="a\"b"`)
	f.Fuzz(func(t *testing.T, cd string) {
		name, err := partFilename(cd)
		if err == nil && name == "" {
			t.Fatalf("%q: empty filename accepted", cd)
		}
		if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("%q: error %v is not invalid_argument", cd, err)
		}
		// Whatever the name, it resolves to a clean absolute path or is refused.
		c := &fsCall{}
		c.user.Home = "/home/user"
		if p, err := c.resolve("path", name); err == nil && (!strings.HasPrefix(p, "/") || strings.Contains(p, "/../")) {
			t.Fatalf("%q resolved to %q", name, p)
		}
	})
}

func TestAcceptsGzip(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{
		"": false, "gzip": true, "gzip, deflate": true, "deflate, GZIP;q=0.5": true,
		"gzip;q=0": false, "br": false, "x-gzip": false,
	} {
		if got := acceptsGzip(v); got != want {
			t.Errorf("acceptsGzip(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestFilesErrorMapsFullDiskTo507(t *testing.T) {
	t.Parallel()
	err := filesError(&errdefs.RemoteError{Code: "too_large", Message: "write /x: no space left on device"})
	if status, _ := errdefs.HTTPStatus(err); status != http.StatusInsufficientStorage {
		t.Errorf("status %d, want 507", status)
	}
	if status, _ := errdefs.HTTPStatus(filesError(fmt.Errorf("x: %w", errdefs.ErrNotFound))); status != 404 {
		t.Errorf("not found: status %d", status)
	}
}

// goneSandboxes answers every Agent call with not found, so that a /files
// request that passes its credentials check answers 404 and one that does
// not answers 401.
type goneSandboxes struct{ Sandboxes }

func (goneSandboxes) Agent(_ context.Context, id string) (*agentconn.Conn, error) {
	return nil, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
}

func TestFilesCredentials(t *testing.T) {
	t.Parallel()
	s := New(Options{Secret: []byte("test-secret"), Sandboxes: goneSandboxes{}})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	tokA, tokB := s.EnvdToken("sbA"), s.EnvdToken("sbB")
	exp := time.Now().Unix() + 300
	past := time.Now().Unix() - 10
	signed := func(tok, p, op string, exp *int64) string {
		q := url.Values{"path": {p}, "signature": {signature(tok, p, op, "", exp)}}
		if exp != nil {
			q.Set("signature_expiration", strconv.FormatInt(*exp, 10))
		}
		return q.Encode()
	}
	for _, tt := range []struct {
		name, method, sandbox, token, query string
		want                                int
	}{
		{"token", "GET", "sbA", tokA, "path=/a", 404},
		{"another sandbox's token", "GET", "sbA", tokB, "path=/a", 401},
		{"wrong token with a good signature", "GET", "sbA", "nope", signed(tokA, "/a", opRead, nil), 401},
		{"nothing", "GET", "sbA", "", "path=/a", 401},
		{"read signature", "GET", "sbA", "", signed(tokA, "/a", opRead, &exp), 404},
		{"read signature used to write", "POST", "sbA", "", signed(tokA, "/a", opRead, &exp), 401},
		{"write signature", "POST", "sbA", "", signed(tokA, "/a", opWrite, nil), 404},
		{"write signature used to read", "GET", "sbA", "", signed(tokA, "/a", opWrite, nil), 401},
		{"another sandbox's signature", "GET", "sbB", "", signed(tokA, "/a", opRead, nil), 401},
		{"expired signature", "GET", "sbA", "", signed(tokA, "/a", opRead, &past), 401},
		{"signature for another path", "GET", "sbA", "", strings.Replace(signed(tokA, "/a", opRead, nil), "path=%2Fa", "path=%2Fb", 1), 401},
	} {
		req, _ := http.NewRequest(tt.method, hs.URL+"/files?"+tt.query, strings.NewReader("x"))
		req.Header.Set("E2b-Sandbox-Id", tt.sandbox)
		req.Header.Set("Content-Type", "application/octet-stream")
		if tt.token != "" {
			req.Header.Set("X-Access-Token", tt.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body apiError
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != tt.want || body.Code != tt.want {
			t.Errorf("%s: status %d, code %d (%s), want %d", tt.name, resp.StatusCode, body.Code, body.Message, tt.want)
		}
	}
}

func TestMetadataHeaders(t *testing.T) {
	t.Parallel()
	h := http.Header{}
	h.Add("X-Metadata-Author", "ann")
	h.Add("x-metadata-PURPOSE", "first")
	h.Add("X-Metadata-Purpose", "second")
	h.Add("X-Metadata-", "no key")
	h.Add("X-Access-Token", "not metadata")
	want := map[string]string{"author": "ann", "purpose": "first"}
	if got := metadataHeaders(h); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("metadata %v, want %v", got, want)
	}
	if got := metadataHeaders(http.Header{"Content-Type": {"x"}}); got != nil {
		t.Errorf("no metadata headers: %v", got)
	}
}
