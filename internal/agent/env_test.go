package agent

import (
	"maps"
	"net/http"
	"testing"

	"github.com/hotcell/hotcell/internal/wire"
)

// TestSetEnv: the set is laid over the box's env for every exec after it,
// under the exec's own env, and a new set replaces the old one whole.
func TestSetEnv(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t, func(o *Options) { o.BaseEnv = []string{"PATH=/usr/bin:/bin", "TPL=base", "KEEP=1"} })
	run := func(env map[string]string) string {
		var res wire.ExecResult
		a.call(http.MethodPost, "/v1/exec", nil, wire.ExecRequest{Command: `echo "$TPL,$OWNER,$KEEP"`, Env: env}, http.StatusOK, &res)
		return res.Stdout
	}
	if got, want := run(nil), "base,,1\n"; got != want {
		t.Fatalf("before a set: got %q, want %q", got, want)
	}
	a.call(http.MethodPut, "/v1/env", nil, wire.SetEnvRequest{Env: map[string]string{"TPL": "claimed", "OWNER": "a"}}, http.StatusNoContent, nil)
	if got, want := run(nil), "claimed,a,1\n"; got != want {
		t.Fatalf("after a set: got %q, want %q", got, want)
	}
	if got, want := run(map[string]string{"OWNER": "exec"}), "claimed,exec,1\n"; got != want {
		t.Fatalf("exec env over the set: got %q, want %q", got, want)
	}
	a.call(http.MethodPut, "/v1/env", nil, wire.SetEnvRequest{Env: map[string]string{"OWNER": "b"}}, http.StatusNoContent, nil)
	if got, want := run(nil), "base,b,1\n"; got != want {
		t.Fatalf("a second set replaces the first: got %q, want %q", got, want)
	}
	a.callErr(http.MethodPut, "/v1/env", nil, wire.SetEnvRequest{Env: map[string]string{"A=B": "x"}}, http.StatusBadRequest, "env")
}

// TestBoxEnv: GET /v1/env answers the box's own env, never the set laid
// over it (a claimer's tokens must not go into a snapshot's image).
func TestBoxEnv(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t, func(o *Options) { o.BaseEnv = []string{"PATH=/usr/bin:/bin", "TPL=base", "EQ=a=b", "=bad"} })
	a.call(http.MethodPut, "/v1/env", nil, wire.SetEnvRequest{Env: map[string]string{"TPL": "claimed", "TOKEN": "secret"}}, http.StatusNoContent, nil)
	var got wire.SetEnvRequest
	a.call(http.MethodGet, "/v1/env", nil, nil, http.StatusOK, &got)
	if want := map[string]string{"PATH": "/usr/bin:/bin", "TPL": "base", "EQ": "a=b"}; !maps.Equal(got.Env, want) {
		t.Errorf("the box's env: got %q, want %q", got.Env, want)
	}
}
