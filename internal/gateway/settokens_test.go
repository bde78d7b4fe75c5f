package gateway

import (
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/gateway/gatewaytest"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestTokensAcrossDaemons: two daemons' gateways on one PostgreSQL store.
// A token B has never seen, minted by A after B loaded its tokens, is
// found in the store (a pod of A's whose call reaches B behind a Service
// in front of the set); a rotation on A is taken up at B with the new
// token, after which B refuses the old one; a token of the right shape
// that the store lacks is refused, and so is a made-up one.
func TestTokensAcrossDaemons(t *testing.T) {
	t.Parallel()
	url := testenv.RequirePostgres(t)
	up := gatewaytest.New(t)
	a := newEnvAt(t, url, up, nil, nil)
	b := newEnvAt(t, url, up, nil, nil)
	post := func(e *env, tok string) int {
		t.Helper()
		resp, _ := e.call("/openai/chat/completions", "Authorization", "Bearer "+tok, `{}`)
		return resp.StatusCode
	}
	vars := a.grant("sb-1", "openai")
	old := vars["OPENAI_API_KEY"]
	if st := post(b, old); st != 200 {
		t.Fatalf("A's new token at B: got %d, want 200", st)
	}
	cred, err := a.g.Rotate(t.Context(), "sb-1", "openai")
	if err != nil {
		t.Fatal(err)
	}
	if st := post(b, cred.Token); st != 200 {
		t.Errorf("the rotated token at B: got %d, want 200", st)
	}
	if st := post(b, old); st != 401 {
		t.Errorf("the token rotated away, at B once it saw the new one: got %d, want 401", st)
	}
	unknown, _ := newToken()
	for _, tok := range []string{unknown, tokenPrefix + "guess", "sk-not-a-gateway-token"} {
		if st := post(b, tok); st != 401 {
			t.Errorf("token %.12s... at B: got %d, want 401", tok, st)
		}
	}
	if !wellFormed(unknown) || wellFormed(tokenPrefix+"guess") || wellFormed(old+"x") {
		t.Error("wellFormed: a made token must pass, a short or long one not")
	}
}

// TestRevocationAcrossDaemons is the attack of a sandbox whose token was
// revoked on daemon A and which keeps calling through daemon B's gateway,
// which had already used the token: with Recheck (a store the daemons
// share), B refuses it once Recheck has passed since it last found the
// token in the store, and the call never reaches the upstream. A token
// rotated away on A is refused at B the same way, without B seeing the
// new one; the new one works at B. Without Recheck (a daemon alone on its
// store) B keeps its word, as before.
func TestRevocationAcrossDaemons(t *testing.T) {
	t.Parallel()
	const recheck = 300 * time.Millisecond
	url := testenv.RequirePostgres(t)
	up := gatewaytest.New(t)
	withRecheck := func(o *Options) { o.Recheck = recheck }
	a := newEnvAt(t, url, up, nil, withRecheck)
	b := newEnvAt(t, url, up, nil, withRecheck)
	noRecheck := newEnvAt(t, url, up, nil, nil)
	post := func(e *env, tok string) int {
		t.Helper()
		resp, _ := e.call("/openai/chat/completions", "Authorization", "Bearer "+tok, `{}`)
		return resp.StatusCode
	}
	tok := a.grant("sb-1", "openai")["OPENAI_API_KEY"]
	for _, e := range []*env{b, noRecheck} {
		if st := post(e, tok); st != 200 {
			t.Fatalf("A's token at another gateway: got %d, want 200", st)
		}
	}
	if err := a.g.Revoke(t.Context(), "sb-1", "openai"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(recheck + 50*time.Millisecond) // the bound
	seen := len(up.Requests())
	for i := range 3 {
		if st := post(b, tok); st != 401 {
			t.Errorf("call %d of the revoked token at B after the bound: got %d, want 401", i, st)
		}
	}
	if got := len(up.Requests()); got != seen {
		t.Errorf("the upstream got %d calls of the revoked token after the bound, want none", got-seen)
	}
	// A gateway without Recheck still takes the token on its word.
	if st := post(noRecheck, tok); st != 200 {
		t.Errorf("the revoked token at a gateway without Recheck: got %d, want 200 (unchanged)", st)
	}

	// A rotation on A: B refuses the old token after the bound, and
	// takes the new one.
	old := a.grant("sb-2", "openai")["OPENAI_API_KEY"]
	if st := post(b, old); st != 200 {
		t.Fatalf("sb-2's token at B: got %d, want 200", st)
	}
	cred, err := a.g.Rotate(t.Context(), "sb-2", "openai")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(recheck + 50*time.Millisecond)
	seen = len(up.Requests())
	if st := post(b, old); st != 401 {
		t.Errorf("the token rotated away on A, at B after the bound: got %d, want 401", st)
	}
	if got := len(up.Requests()); got != seen {
		t.Errorf("the upstream got %d calls of the rotated-away token, want none", got-seen)
	}
	if st := post(b, cred.Token); st != 200 {
		t.Errorf("the rotated token at B: got %d, want 200", st)
	}
	// A's own token keeps working at A past the bound (found again).
	if st := post(a, cred.Token); st != 200 {
		t.Errorf("the rotated token at A after the bound: got %d, want 200", st)
	}
}
