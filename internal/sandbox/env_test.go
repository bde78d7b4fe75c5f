package sandbox

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/driver/fakedriver"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/gateway"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/testenv"
	"github.com/hotcell/hotcell/internal/wire"
)

// envRecorder stands for an agent at a connect hook: it keeps the env
// each PUT /v1/env sets and answers as the agent does.
type envRecorder struct {
	mu   sync.Mutex
	sets []map[string]string
}

func (r *envRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var body wire.SetEnvRequest
	if req.Method != http.MethodPut || req.URL.Path != "/v1/env" || json.NewDecoder(req.Body).Decode(&body) != nil {
		return &http.Response{StatusCode: http.StatusBadRequest, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
	}
	r.mu.Lock()
	r.sets = append(r.sets, body.Env)
	r.mu.Unlock()
	return &http.Response{StatusCode: http.StatusNoContent, Body: io.NopCloser(strings.NewReader("")), Request: req}, nil
}

func (r *envRecorder) got() []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.sets
}

// printenv runs printenv name in sandbox id's box through its agent. Right
// after a restart the connection may still hold the session of the agent
// that stopped, whose end it has not read yet: an exec that cannot open a
// stream is tried again on the new session.
func printenv(t *testing.T, m *Manager, id, name string) string {
	t.Helper()
	var (
		res  wire.ExecResult
		last error
	)
	waitFor(t, "an exec in "+id, func() bool {
		conn, err := m.Agent(t.Context(), id)
		if err != nil {
			t.Fatal(err)
		}
		last = conn.DoJSON(t.Context(), http.MethodPost, "/v1/exec", wire.ExecRequest{Argv: []string{"printenv", name}}, &res)
		if last != nil && !errors.Is(last, errdefs.ErrUnavailable) {
			t.Fatal(last)
		}
		return last == nil
	})
	return strings.TrimSpace(res.Stdout)
}

// TestSandboxEnvInSharedStore stands for two daemons on one PostgreSQL
// store: A makes a sandbox with the LLM gateway, whose tokens its agent
// lays over the box's env. The env is in the store, not in A's data dir,
// so B's connect hook (what B runs when it accepts the agent's session)
// sends the same env; it goes when the sandbox is destroyed.
func TestSandboxEnvInSharedStore(t *testing.T) {
	t.Parallel()
	url := testenv.RequirePostgres(t)
	open := func() (*Manager, *store.Store) {
		dir, err := os.MkdirTemp("/tmp", "hcev")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		st, err := store.Open(t.Context(), url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		log := slog.New(slog.DiscardHandler)
		gw, err := gateway.New(t.Context(), gateway.Options{
			Providers:  []config.Provider{{Name: "openai", Kind: "openai", BaseURL: "http://127.0.0.1:1", KeyEnv: "HOTCELL_TEST_KEY"}},
			Getenv:     func(string) string { return "sk-upstream" },
			Store:      st,
			SandboxURL: "http://gateway.invalid:8090",
			Log:        log,
		})
		if err != nil {
			t.Fatal(err)
		}
		m := New(fakedriver.New(t), st, Options{DataDir: dir, AgentBinary: "/bin/true", ReadyTimeout: 5 * time.Second,
			Log: log, Gateway: gw})
		t.Cleanup(m.Close)
		if err := m.Recover(t.Context()); err != nil {
			t.Fatal(err)
		}
		return m, st
	}
	a, _ := open()
	b, stB := open()
	ctx := t.Context()
	sb, err := a.Create(ctx, wire.CreateSandboxRequest{Image: "x", Gateway: []string{"openai"}}, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := printenv(t, a, sb.ID, "OPENAI_API_KEY")
	if token == "" {
		t.Fatal("the box has no OPENAI_API_KEY: the gateway's env did not reach its agent")
	}
	if _, err := os.Stat(a.legacyEnvFile(sb.ID)); !os.IsNotExist(err) {
		t.Errorf("env file in A's data dir: got %v, want none (the env is in the store)", err)
	}
	var rec envRecorder
	if err := b.sendEnv(sb.ID)(ctx, &rec); err != nil {
		t.Fatalf("B's connect hook: %v", err)
	}
	sets := rec.got()
	if len(sets) != 1 || sets[0]["OPENAI_API_KEY"] != token || sets[0]["OPENAI_BASE_URL"] != "http://gateway.invalid:8090/openai" {
		t.Fatalf("env B sends at a session it accepts: got %v, want the box's token %q and the gateway's URL", sets, token)
	}
	if err := a.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the sandbox's record to go", func() bool {
		_, err := stB.Get(ctx, sb.ID)
		return err != nil
	})
	if env, err := stB.SandboxEnv(ctx, sb.ID); err != nil || env != nil {
		t.Errorf("env after destroy: got %v, %v; want none", env, err)
	}
}

// TestSandboxEnvFileMoved: a sandbox whose env an older daemon kept in
// its dir (env.json) gets it at its next session, and the file moves into
// the store once: gone from the disk, sent from the store after.
func TestSandboxEnvFileMoved(t *testing.T) {
	t.Parallel()
	m, _, st := newTestManager(t, LifecycleOptions{})
	ctx := t.Context()
	sb, err := m.Create(ctx, wire.CreateSandboxRequest{Image: "x"}, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := printenv(t, m, sb.ID, "HOTCELL_TEST_OWNER"); got != "" {
		t.Fatalf("before the file: got %q, want unset", got)
	}
	if _, err := m.Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	// As the daemon before the store kept it (0600, JSON).
	file := m.legacyEnvFile(sb.ID)
	if err := os.WriteFile(file, []byte(`{"HOTCELL_TEST_OWNER":"from-file"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Start(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := printenv(t, m, sb.ID, "HOTCELL_TEST_OWNER"); got != "from-file" {
		t.Errorf("after the upgrade: got %q, want the file's env", got)
	}
	if _, err := os.Stat(file); !os.IsNotExist(err) {
		t.Errorf("env file after it was moved: got %v, want gone", err)
	}
	env, err := st.SandboxEnv(ctx, sb.ID)
	if err != nil || !cmp.Equal(env, map[string]string{"HOTCELL_TEST_OWNER": "from-file"}) {
		t.Errorf("env in the store: got %v, %v", env, err)
	}
	// The next session sends it from the store.
	if _, err := m.Stop(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Start(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := printenv(t, m, sb.ID, "HOTCELL_TEST_OWNER"); got != "from-file" {
		t.Errorf("at the session after: got %q, want the moved env", got)
	}
	if err := m.Destroy(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if env, err := st.SandboxEnv(ctx, sb.ID); err != nil || env != nil {
		t.Errorf("env after destroy: got %v, %v; want none", env, err)
	}
	if _, err := os.Stat(filepath.Dir(file)); !os.IsNotExist(err) {
		t.Errorf("sandbox dir after destroy: got %v, want gone", err)
	}
}
