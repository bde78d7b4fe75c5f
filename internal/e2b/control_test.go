package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/wire"
)

// fakeSandboxes is an in-memory sandbox manager for the control plane's
// logic; test/e2e/e2b_control_test.go runs it against the real one.
type fakeSandboxes struct {
	mu      sync.Mutex
	n       int
	now     time.Time
	sbs     map[string]wire.Sandbox
	created []wire.CreateSandboxRequest
}

func newFake() *fakeSandboxes {
	return &fakeSandboxes{sbs: map[string]wire.Sandbox{}, now: time.Now().UTC().Add(-time.Hour)}
}

func (f *fakeSandboxes) Create(ctx context.Context, req wire.CreateSandboxRequest, co sandbox.CreateOptions) (wire.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	f.now = f.now.Add(time.Second)
	sb := wire.Sandbox{ID: fmt.Sprintf("sb%04d", f.n), State: wire.StateRunning, Image: req.Image, Env: req.Env,
		Labels: req.Labels, Egress: req.Egress, CreatedAt: f.now}
	f.sbs[sb.ID] = sb
	f.created = append(f.created, req)
	return sb, nil
}

func (f *fakeSandboxes) Get(ctx context.Context, id string) (wire.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sbs[id]
	if !ok {
		return sb, fmt.Errorf("sandbox %s: %w", id, errdefs.ErrNotFound)
	}
	return sb, nil
}

func (f *fakeSandboxes) List(ctx context.Context, lf sandbox.ListFilter) ([]wire.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []wire.Sandbox
	for _, sb := range f.sbs {
		ok := true
		for k, v := range lf.Labels {
			ok = ok && sb.Labels[k] == v
		}
		if ok {
			out = append(out, sb)
		}
	}
	return out, nil
}

func (f *fakeSandboxes) Destroy(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.sbs, id)
	return nil
}

func (f *fakeSandboxes) setState(id string, from, to wire.State) (wire.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sbs[id]
	if !ok {
		return sb, errdefs.ErrNotFound
	}
	if sb.State != from {
		return sb, fmt.Errorf("sandbox %s is %s: %w", id, sb.State, errdefs.ErrConflict)
	}
	sb.State = to
	f.sbs[id] = sb
	return sb, nil
}

func (f *fakeSandboxes) Pause(ctx context.Context, id string) (wire.Sandbox, error) {
	return f.setState(id, wire.StateRunning, wire.StatePaused)
}

func (f *fakeSandboxes) Resume(ctx context.Context, id string) (wire.Sandbox, error) {
	return f.setState(id, wire.StatePaused, wire.StateRunning)
}

func (f *fakeSandboxes) SetTimeouts(ctx context.Context, id string, req wire.SetTimeoutsRequest) (wire.Sandbox, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sb, ok := f.sbs[id]
	if !ok {
		return sb, errdefs.ErrNotFound
	}
	t := sb.Timeouts
	if t == nil {
		t = &wire.SandboxTimeouts{LifetimeAction: wire.ActionDestroy}
	}
	if req.LifetimeAction != nil {
		t.LifetimeAction = *req.LifetimeAction
	}
	if req.MaxLifetimeSeconds != nil {
		t.MaxLifetimeSeconds = *req.MaxLifetimeSeconds
		t.ExpiresAt = nil
		if t.MaxLifetimeSeconds > 0 {
			exp := sb.CreatedAt.Add(time.Duration(t.MaxLifetimeSeconds) * time.Second)
			t.ExpiresAt = &exp
		}
	}
	sb.Timeouts = t
	f.sbs[id] = sb
	return sb, nil
}

func (f *fakeSandboxes) Agent(ctx context.Context, id string) (*agentconn.Conn, error) {
	return nil, errors.New("no agent in the fake")
}

func controlServer(t *testing.T) (*fakeSandboxes, *httptest.Server) {
	t.Helper()
	f := newFake()
	s := New(Options{Sandboxes: f, Secret: []byte("s"), Token: "key", DefaultImage: "hotcell/base:latest",
		Templates: map[string]string{"code-interpreter-v1": "myorg/ci:1"}, Domain: "preview.localhost"})
	hs := httptest.NewServer(s.Handler())
	t.Cleanup(hs.Close)
	return f, hs
}

// call sends a control request with the key and decodes a JSON answer
// into out (if given); it returns the status and the raw body.
func call(t *testing.T, hs *httptest.Server, method, path, body string, out any) (int, http.Header, string) {
	t.Helper()
	req, _ := http.NewRequest(method, hs.URL+path, strings.NewReader(body))
	req.Header.Set("X-API-KEY", "key")
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw json.RawMessage
	_ = json.NewDecoder(resp.Body).Decode(&raw)
	if out != nil && len(raw) > 0 {
		if err := json.Unmarshal(raw, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, raw)
		}
	}
	return resp.StatusCode, resp.Header, string(raw)
}

func TestCreateMapping(t *testing.T) {
	f, hs := controlServer(t)
	for _, c := range []struct {
		name, body string
		image      string
		egress     *wire.EgressPolicy
		public     bool
	}{
		{"base is the default image", `{"templateID":"base"}`, "hotcell/base:latest", nil, true},
		{"an operator's alias", `{"templateID":"code-interpreter-v1"}`, "myorg/ci:1", nil, true},
		{"an image name", `{"templateID":"python:3.12-slim"}`, "python:3.12-slim", nil, true},
		{"no internet", `{"templateID":"base","allow_internet_access":false}`, "hotcell/base:latest", &wire.EgressPolicy{Mode: "none"}, true},
		{"internet", `{"templateID":"base","allow_internet_access":true}`, "hotcell/base:latest", &wire.EgressPolicy{Mode: "open"}, true},
		{"deny all but some", `{"templateID":"base","network":{"denyOut":["0.0.0.0/0"],"allowOut":["example.com","10.0.0.0/8"]}}`, "hotcell/base:latest",
			&wire.EgressPolicy{Mode: "allowlist", Allow: []string{"example.com", "10.0.0.0/8"}}, true},
		{"allowOut alone allows all", `{"templateID":"base","network":{"allowOut":["example.com"]}}`, "hotcell/base:latest", nil, true},
		{"private traffic", `{"templateID":"base","network":{"allowPublicTraffic":false}}`, "hotcell/base:latest", nil, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var sb sandboxJSON
			st, _, raw := call(t, hs, "POST", "/v2/sandboxes", c.body, &sb)
			if st != 201 {
				t.Fatalf("status %d: %s", st, raw)
			}
			req := f.created[len(f.created)-1]
			if req.Image != c.image {
				t.Errorf("image %q, want %q", req.Image, c.image)
			}
			if fmt.Sprint(req.Egress) != fmt.Sprint(c.egress) {
				t.Errorf("egress %+v, want %+v", req.Egress, c.egress)
			}
			if got := req.Labels[LabelPublicTraffic] == "true"; got != c.public {
				t.Errorf("public %v, want %v", got, c.public)
			}
			var tpl struct{ TemplateID string }
			_ = json.Unmarshal([]byte(c.body), &tpl)
			if sb.TemplateID != tpl.TemplateID || sb.EnvdVersion != EnvdVersion || sb.ClientID == "" ||
				sb.Domain == nil || *sb.Domain != "preview.localhost" || sb.EnvdAccessToken == "" || sb.SandboxID == "" {
				t.Errorf("answer %s", raw)
			}
		})
	}

	t.Run("metadata, envs and timeout", func(t *testing.T) {
		var sb sandboxJSON
		st, _, raw := call(t, hs, "POST", "/v2/sandboxes",
			`{"templateID":"base","metadata":{"user":"u1","app":"a b"},"envVars":{"A":"1"},"timeout":120,"autoPause":true}`, &sb)
		if st != 201 {
			t.Fatalf("status %d: %s", st, raw)
		}
		req := f.created[len(f.created)-1]
		if req.Labels["user"] != "u1" || req.Labels["app"] != "a b" || req.Labels[LabelTemplate] != "base" || req.Env["A"] != "1" {
			t.Errorf("request %+v", req)
		}
		got, _ := f.Get(t.Context(), sb.SandboxID)
		tm := got.Timeouts
		if tm == nil || tm.ExpiresAt == nil || tm.LifetimeAction != "pause" {
			t.Fatalf("timeouts %+v", tm)
		}
		// The lifetime counts from when the sandbox is ready: now + 120 s.
		if left := time.Until(*tm.ExpiresAt); left < 110*time.Second || left > 122*time.Second {
			t.Errorf("expires in %v, want about 120s", left)
		}
		var d detailJSON
		call(t, hs, "GET", "/sandboxes/"+sb.SandboxID, "", &d)
		if len(d.Metadata) != 2 || d.Metadata["user"] != "u1" || d.Lifecycle.OnTimeout != "pause" || d.EnvdAccessToken == "" {
			t.Errorf("detail %+v", d)
		}
	})

	t.Run("no timeout means E2B's 300 s", func(t *testing.T) {
		var sb sandboxJSON
		call(t, hs, "POST", "/v2/sandboxes", `{"templateID":"base"}`, &sb)
		got, _ := f.Get(t.Context(), sb.SandboxID)
		if tm := got.Timeouts; tm == nil || tm.ExpiresAt == nil || time.Until(*tm.ExpiresAt) < 290*time.Second || tm.LifetimeAction != "destroy" {
			t.Errorf("timeouts %+v", tm)
		}
	})

	for _, c := range []struct{ body, field string }{
		{`{}`, "templateID"},
		{`{"templateID":"Not An Image!"}`, "templateID"},
		{`{"templateID":"base","mcp":{"x":{}}}`, "mcp"},
		{`{"templateID":"base","iam":{"tokens":{}}}`, "iam"},
		{`{"templateID":"base","volumeMounts":[{"name":"v","path":"/data"}]}`, "volumeMounts"},
		{`{"templateID":"base","autoPause":true,"autoResume":{"enabled":true}}`, "autoResume"},
		{`{"templateID":"base","network":{"denyOut":["8.8.8.8/32"]}}`, "network.denyOut[0]"},
		{`{"templateID":"base","network":{"httpsPorts":[8443]}}`, "network.httpsPorts"},
		{`{"templateID":"base","network":{"maskRequestHost":"x"}}`, "network.maskRequestHost"},
		{`{"templateID":"base","network":{"rules":{"api.example.com":[{}]}}}`, "network.rules"},
		{`{"templateID":"base","network":{"egressProxy":{"address":"p:1"}}}`, "network.egressProxy"},
		{`{"templateID":"base","metadata":{"bad key":"v"}}`, "metadata.bad key"},
		{`{"templateID":"base","metadata":{"e2b.hotcell/template":"x"}}`, "metadata.e2b.hotcell/template"},
		{`{"templateID":"base","envVars":{"A=B":"1"}}`, "envVars"},
		{`{"templateID":"base","timeout":-1}`, "timeout"},
		{`{"templateID":"base","surprise":1}`, "surprise"},
	} {
		n := len(f.created)
		var e apiError
		st, _, raw := call(t, hs, "POST", "/v2/sandboxes", c.body, &e)
		if st != 400 || e.Code != 400 || !strings.Contains(e.Message, c.field) {
			t.Errorf("%s: %d %s, want 400 naming %s", c.body, st, raw, c.field)
		}
		if len(f.created) != n {
			t.Errorf("%s: a sandbox was created", c.body)
		}
	}
}

func TestKillPauseConnect(t *testing.T) {
	f, hs := controlServer(t)
	var sb sandboxJSON
	call(t, hs, "POST", "/v2/sandboxes", `{"templateID":"base","timeout":60}`, &sb)
	id := sb.SandboxID

	// Pause: 204, then 409 in the body (the SDK's "already paused").
	if st, _, raw := call(t, hs, "POST", "/sandboxes/"+id+"/pause", "", nil); st != 204 {
		t.Fatalf("pause: %d %s", st, raw)
	}
	got, _ := f.Get(t.Context(), id)
	if got.State != wire.StatePaused || got.Timeouts.ExpiresAt != nil {
		t.Errorf("paused sandbox: %s, expires %v (a paused sandbox has no lifetime)", got.State, got.Timeouts.ExpiresAt)
	}
	var e apiError
	if st, _, raw := call(t, hs, "POST", "/sandboxes/"+id+"/pause", "{}", &e); st != 409 || e.Code != 409 {
		t.Errorf("pause again: %d %s", st, raw)
	}
	// setTimeout of a paused sandbox leaves it without a lifetime.
	if st, _, raw := call(t, hs, "POST", "/sandboxes/"+id+"/timeout", `{"timeout":5}`, nil); st != 204 {
		t.Errorf("timeout of paused: %d %s", st, raw)
	}
	// Connect resumes: 201, with a fresh timeout.
	var c sandboxJSON
	if st, _, raw := call(t, hs, "POST", "/v2/sandboxes/"+id+"/connect", `{"timeout":30}`, &c); st != 201 || c.SandboxID != id || c.EnvdAccessToken != sb.EnvdAccessToken {
		t.Fatalf("connect paused: %d %s", st, raw)
	}
	got, _ = f.Get(t.Context(), id)
	if got.State != wire.StateRunning || got.Timeouts.ExpiresAt == nil || time.Until(*got.Timeouts.ExpiresAt) > 31*time.Second {
		t.Errorf("resumed: %s expires %v", got.State, got.Timeouts.ExpiresAt)
	}
	// Connect to a running sandbox: 200, and it never shortens the life.
	if st, _, raw := call(t, hs, "POST", "/v2/sandboxes/"+id+"/connect", `{"timeout":5}`, nil); st != 200 {
		t.Errorf("connect running: %d %s", st, raw)
	}
	got, _ = f.Get(t.Context(), id)
	if time.Until(*got.Timeouts.ExpiresAt) < 20*time.Second {
		t.Errorf("connect shortened the life: expires %v", got.Timeouts.ExpiresAt)
	}
	if st, _, _ := call(t, hs, "POST", "/v2/sandboxes/"+id+"/connect", `{}`, nil); st != 200 {
		t.Errorf("connect, no timeout: %d", st)
	}
	got, _ = f.Get(t.Context(), id)
	if time.Until(*got.Timeouts.ExpiresAt) < 290*time.Second {
		t.Errorf("connect without a timeout gives 300 s: expires %v", got.Timeouts.ExpiresAt)
	}
	// setTimeout may shorten it.
	if st, _, raw := call(t, hs, "POST", "/sandboxes/"+id+"/timeout", `{"timeout":10}`, nil); st != 204 {
		t.Errorf("timeout: %d %s", st, raw)
	}
	got, _ = f.Get(t.Context(), id)
	if left := time.Until(*got.Timeouts.ExpiresAt); left > 11*time.Second || left < 5*time.Second {
		t.Errorf("setTimeout 10: expires in %v", left)
	}
	for _, bad := range []string{`{}`, `{"timeout":-5}`, `not json`} {
		if st, _, raw := call(t, hs, "POST", "/sandboxes/"+id+"/timeout", bad, nil); st != 400 {
			t.Errorf("timeout %s: %d %s", bad, st, raw)
		}
	}

	// Kill: 204, then 404 in the body (the SDK's false), for a malformed
	// id too.
	if st, _, raw := call(t, hs, "DELETE", "/sandboxes/"+id, "", nil); st != 204 {
		t.Fatalf("kill: %d %s", st, raw)
	}
	for _, p := range []string{"/sandboxes/" + id, "/sandboxes/NOT_AN_ID"} {
		e = apiError{}
		if st, _, raw := call(t, hs, "DELETE", p, "", &e); st != 404 || e.Code != 404 {
			t.Errorf("kill %s: %d %s", p, st, raw)
		}
		for _, m := range []struct{ method, path string }{{"GET", p}, {"POST", p + "/pause"}, {"POST", "/v2" + p + "/connect"}} {
			e = apiError{}
			if st, _, raw := call(t, hs, m.method, m.path, "{}", &e); st != 404 || e.Code != 404 {
				t.Errorf("%s %s: %d %s", m.method, m.path, st, raw)
			}
		}
	}
}

func TestListFiltersAndPaging(t *testing.T) {
	f, hs := controlServer(t)
	var ids []string
	for i := range 5 {
		var sb sandboxJSON
		body := fmt.Sprintf(`{"templateID":"base","metadata":{"team":"t%d","env":"a b&c=d"}}`, i%2)
		if st, _, raw := call(t, hs, "POST", "/v2/sandboxes", body, &sb); st != 201 {
			t.Fatalf("create: %d %s", st, raw)
		}
		ids = append(ids, sb.SandboxID)
	}
	// A sandbox made through hotcell's own API is listed too.
	f.Create(t.Context(), wire.CreateSandboxRequest{Image: "hotcell/base:latest", Labels: map[string]string{"team": "t0"}}, sandbox.CreateOptions{})

	list := func(query string) ([]detailJSON, string) {
		t.Helper()
		var out []detailJSON
		st, h, raw := call(t, hs, "GET", "/v2/sandboxes"+query, "", &out)
		if st != 200 {
			t.Fatalf("list %s: %d %s", query, st, raw)
		}
		return out, h.Get("X-Next-Token")
	}
	idsOf := func(l []detailJSON) (out []string) {
		for _, d := range l {
			out = append(out, d.SandboxID)
			if d.EnvdAccessToken != "" {
				t.Errorf("list shows %s's envd token", d.SandboxID)
			}
		}
		return out
	}

	// The SDK's wire form of metadata {team:'t1', env:'a b&c=d'}: each
	// key and value encodeURIComponent'd, joined by URLSearchParams, the
	// whole encoded again as the parameter.
	got, next := list("?metadata=team%3Dt1%26env%3Da%252520b%252526c%25253Dd")
	if want := []string{ids[1], ids[3]}; fmt.Sprint(idsOf(got)) != fmt.Sprint(want) || next != "" {
		t.Errorf("metadata filter: %v next %q, want %v", idsOf(got), next, want)
	}
	if got[0].Metadata["env"] != "a b&c=d" || got[0].TemplateID != "base" || len(got[0].Metadata) != 2 {
		t.Errorf("listed %+v", got[0])
	}

	// Pages of 2, in creation order, stable across a kill and a create
	// between pages.
	p1, next := list("?limit=2")
	if fmt.Sprint(idsOf(p1)) != fmt.Sprint(ids[:2]) || next == "" {
		t.Fatalf("page 1: %v next %q", idsOf(p1), next)
	}
	f.Destroy(t.Context(), ids[2])
	var late sandboxJSON
	call(t, hs, "POST", "/v2/sandboxes", `{"templateID":"base"}`, &late)
	p2, next := list("?limit=2&nextToken=" + next)
	if fmt.Sprint(idsOf(p2)) != fmt.Sprint(ids[3:5]) || next == "" {
		t.Fatalf("page 2: %v next %q", idsOf(p2), next)
	}
	p3, next := list("?limit=2&nextToken=" + next)
	if len(p3) != 2 || p3[1].SandboxID != late.SandboxID || next != "" {
		t.Fatalf("page 3: %v next %q", idsOf(p3), next)
	}

	// State filter: the SDK joins states with commas.
	f.Pause(t.Context(), ids[0])
	paused, _ := list("?state=paused")
	if fmt.Sprint(idsOf(paused)) != fmt.Sprint([]string{ids[0]}) || paused[0].State != "paused" {
		t.Errorf("paused: %v", idsOf(paused))
	}
	both, _ := list("?state=running,paused")
	if len(both) != 6 {
		t.Errorf("running,paused: %d sandboxes", len(both))
	}
	desc, _ := list("?order=desc&limit=1")
	if len(desc) != 1 || desc[0].SandboxID != late.SandboxID {
		t.Errorf("desc: %v", idsOf(desc))
	}

	for _, q := range []string{"?state=stopped", "?limit=0", "?limit=101", "?nextToken=garbage", "?order=up", "?startedAfter=yesterday", "?metadata=bad%2520key%3Dv"} {
		var e apiError
		if st, _, raw := call(t, hs, "GET", "/v2/sandboxes"+q, "", &e); st != 400 || e.Code != 400 {
			t.Errorf("list %s: %d %s", q, st, raw)
		}
	}
}
