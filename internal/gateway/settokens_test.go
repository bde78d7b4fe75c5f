package gateway

import (
	"testing"

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
