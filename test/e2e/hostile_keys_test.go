package e2e

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestHostileAPIKeys: an API key leaks (from a CI log, an agent's env). Its
// holder tries to make the leak permanent: mint more keys, list them,
// revoke the operator's other keys. It forges keys near the real one, and
// keeps using the key after it is revoked. Every attempt is refused; the
// operator's other key, the daemon's token and a neighbour sandbox keep
// working.
func TestHostileAPIKeys(t *testing.T) {
	d := sharedDaemon(t)
	ctx := t.Context()
	nb := newSandbox(t, d, client.CreateSandboxRequest{Image: testenv.BaseImage(t)})

	leakedName, otherName := keyName(t, "leaked"), keyName(t, "other")
	leaked, err := d.C.CreateAPIKey(ctx, leakedName)
	if err != nil {
		t.Fatal(err)
	}
	other, err := d.C.CreateAPIKey(ctx, otherName)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = d.C.DeleteAPIKey(ctx, leakedName)
		_ = d.C.DeleteAPIKey(ctx, otherName)
	})
	key := leaked.Key

	// Key management with the key: 403, through the SDK, raw HTTP and the CLI.
	kc, err := client.New("http://"+d.Addr, key)
	if err != nil {
		t.Fatal(err)
	}
	if k, err := kc.CreateAPIKey(ctx, keyName(t, "minted")); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("mint a key with a key: got %+v, %v; want permission denied", k, err)
		_ = d.C.DeleteAPIKey(ctx, keyName(t, "minted"))
	}
	if ks, err := kc.APIKeys(ctx); err == nil {
		t.Errorf("list keys with a key: got %v, want refused", ks)
	}
	if err := kc.DeleteAPIKey(ctx, otherName); err == nil {
		t.Error("revoke another key with a key: got nil error, want refused")
	}
	for _, c := range []struct{ method, path string }{
		{"GET", "/v1/keys"}, {"POST", "/v1/keys"}, {"DELETE", "/v1/keys/" + otherName}, {"DELETE", "/v1/keys/" + leakedName},
	} {
		if code, body := bearerStatus(t, d, c.method, c.path, key); code != http.StatusForbidden || !strings.Contains(body, "daemon's token") {
			t.Errorf("%s %s with a key: got %d %s, want 403 naming the daemon's token", c.method, c.path, code, body)
		}
	}
	if r := newCLIWith(t, "http://"+d.Addr, key).want(1, "keys", "create", keyName(t, "cli")); !strings.Contains(r.stderr, "daemon's token") {
		t.Errorf("hotcell keys create with a key: stderr %q, want the daemon's token named", r.stderr)
	}
	ks, err := d.C.APIKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ks {
		if strings.HasPrefix(k.Name, keyName(t, "")) && k.Name != leakedName && k.Name != otherName {
			t.Errorf("a key minted with a key exists: %s", k.Name)
		}
	}

	// Forgeries near the real key: all 401, before and after it is revoked.
	forged := []string{
		"e2b_" + strings.Repeat("0", 40),
		strings.ToUpper(key),
		key[:10] + strings.Repeat("0", 34), // the hint, which ls shows
		key[:len(key)-1],
		key + "0",
		"hc_" + key[4:],
		flipLast(other.Key), // one digit off another live key
	}
	for _, f := range forged {
		if code, body := bearerStatus(t, d, "GET", "/v1/sandboxes", f); code != http.StatusUnauthorized {
			t.Errorf("forged key %q: got %d %s, want 401", f, code, body)
		}
	}
	// X-API-KEY is the E2B API's header, not a credential of this API.
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+d.Addr+"/v1/sandboxes", nil)
	req.Header.Set("X-API-KEY", key)
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the key as X-API-KEY on /v1: got %v, %v; want 401", resp, err)
	} else {
		resp.Body.Close()
	}

	// The operator revokes the leaked key: refused from the next request on.
	if code, _ := bearerStatus(t, d, "GET", "/v1/sandboxes", key); code != http.StatusOK {
		t.Fatalf("the leaked key before revoke: got %d, want 200", code)
	}
	if err := d.C.DeleteAPIKey(ctx, leakedName); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{"/v1/sandboxes", "/v1/sandboxes/" + nb.ID, "/v1/keys"} {
		if code, body := bearerStatus(t, d, "GET", path, key); code != http.StatusUnauthorized {
			t.Errorf("GET %s with the revoked key: got %d %s, want 401", path, code, body)
		}
	}

	// Afterwards: the other key, the token and the neighbour work.
	if code, body := bearerStatus(t, d, "GET", "/v1/sandboxes", other.Key); code != http.StatusOK {
		t.Errorf("the other key: got %d %s, want 200", code, body)
	}
	mustOK(t, run(t, d, nb.ID, "true"), "exec in the neighbour with the token")
}

// flipLast changes the last hex digit of a key.
func flipLast(k string) string {
	if strings.HasSuffix(k, "0") {
		return k[:len(k)-1] + "1"
	}
	return k[:len(k)-1] + "0"
}
