package daemon

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/agentauth"
	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/sandbox"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/testenv"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// identity is what a daemon starting on cfg's store takes as its
// instance id and agent channel material.
func identity(t *testing.T, cfg config.Config) (string, *agentauth.Material) {
	t.Helper()
	st, err := store.Open(t.Context(), cfg.StoreTarget())
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	inst, err := setInstance(t.Context(), cfg, st, quiet)
	if err != nil {
		t.Fatal(err)
	}
	m, err := agentMaterial(t.Context(), cfg, st, quiet)
	if err != nil {
		t.Fatal(err)
	}
	return inst, m
}

// TestSetIdentity: daemons starting at once on one PostgreSQL store, each
// with a data dir of its own, all take one instance id and one agent
// channel material, and keep no key material in their data dirs; a data dir's own id and
// material are uploaded when the store has none, and lose to the store's
// when it has.
func TestSetIdentity(t *testing.T) {
	t.Parallel()
	t.Run("at once", func(t *testing.T) {
		t.Parallel()
		pg := testenv.RequirePostgres(t)
		const n = 6
		insts := make([]string, n)
		mats := make([]*agentauth.Material, n)
		dirs := make([]string, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			dirs[i] = t.TempDir()
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				insts[i], mats[i] = identity(t, config.Config{DataDir: dirs[i], Store: pg})
			}()
		}
		close(start)
		wg.Wait()
		for i := range n {
			if !sandbox.ValidInstance(insts[i]) || insts[i] != insts[0] {
				t.Errorf("daemon %d: instance %q, daemon 0: %q; want one valid id", i, insts[i], insts[0])
			}
			if mats[i] == nil || !mats[i].Equal(mats[0]) {
				t.Errorf("daemon %d: agent channel material differs from daemon 0's", i)
			}
			if _, err := os.Stat(filepath.Join(dirs[i], "agent-channel")); !os.IsNotExist(err) {
				t.Errorf("daemon %d on PostgreSQL wrote the agent channel's material in its data dir (stat: %v)", i, err)
			}
			if got, err := sandbox.ReadInstance(dirs[i]); err != nil || got != insts[0] {
				t.Errorf("daemon %d: data dir's copy of the instance id %q, %v; want the store's %q", i, got, err, insts[0])
			}
		}
	})
	t.Run("data dir's uploaded, then the store's wins", func(t *testing.T) {
		t.Parallel()
		pg := testenv.RequirePostgres(t)
		// A daemon that ran on its own (SQLite) before joins the store:
		// its boxes keep their labels and pins.
		first := t.TempDir()
		ownInst, ownMat := identity(t, config.Config{DataDir: first})
		if ownInst != "" {
			t.Fatalf("on SQLite setInstance gave %q, want none (the manager reads the data dir)", ownInst)
		}
		ownInst = writeInstance(t, first)
		inst, m := identity(t, config.Config{DataDir: first, Store: pg})
		if inst != ownInst || !m.Equal(ownMat) {
			t.Errorf("first daemon on the store: instance %q (own %q), material same %v; want its own uploaded", inst, ownInst, m.Equal(ownMat))
		}
		// A second one with an identity of its own takes the store's and
		// keeps its files as they were.
		second := t.TempDir()
		_, secondMat := identity(t, config.Config{DataDir: second})
		secondInst := writeInstance(t, second)
		inst2, m2 := identity(t, config.Config{DataDir: second, Store: pg})
		if inst2 != ownInst || !m2.Equal(ownMat) {
			t.Errorf("second daemon: instance %q, material the first's %v; want the store's (%q)", inst2, m2.Equal(ownMat), ownInst)
		}
		if got, _ := sandbox.ReadInstance(second); got != secondInst {
			t.Errorf("second daemon's instance file: %q, want its own %q left as it was", got, secondInst)
		}
		if got, err := agentauth.Load(filepath.Join(second, "agent-channel")); err != nil || !got.Equal(secondMat) {
			t.Errorf("second daemon's agent channel files changed (%v)", err)
		}
	})
	t.Run("sqlite keeps files", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		_, m := identity(t, config.Config{DataDir: dir})
		_, again := identity(t, config.Config{DataDir: dir})
		if !m.Equal(again) {
			t.Error("a second start on SQLite read other material")
		}
		for _, f := range []string{"cert.pem", "cert-key.pem", "token-key"} {
			st, err := os.Stat(filepath.Join(dir, "agent-channel", f))
			if err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("%s: %v, %v; want mode 0600", f, st, err)
			}
		}
	})
}

// writeInstance gives dir an instance id, as a daemon on SQLite makes.
func writeInstance(t *testing.T, dir string) string {
	t.Helper()
	id := sandbox.NewInstance()
	if err := os.WriteFile(filepath.Join(dir, "instance"), []byte(id+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestRegistryAlive: a daemon is alive to the others while its heartbeat
// is within aliveBeats beats; an old one, or none, is dead.
func TestRegistryAlive(t *testing.T) {
	t.Parallel()
	st, err := store.Open(t.Context(), testenv.RequirePostgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	r := &registry{st: st, id: "me", log: quiet}
	now := time.Now()
	for id, at := range map[string]time.Time{
		"fresh": now,
		"late":  now.Add(-(aliveBeats - 1) * registryHeartbeat),
		"dead":  now.Add(-(aliveBeats + 1) * registryHeartbeat),
	} {
		if err := st.Heartbeat(t.Context(), id, "http://127.0.0.1:1", at); err != nil {
			t.Fatal(err)
		}
	}
	for id, want := range map[string]bool{"fresh": true, "late": true, "dead": false, "never-registered": false} {
		if got, err := r.Alive(t.Context(), id); err != nil || got != want {
			t.Errorf("Alive(%s): got %v, %v; want %v", id, got, err, want)
		}
	}
	if r.Self() != "me" {
		t.Errorf("Self: got %q, want me", r.Self())
	}
}

// TestSetSecrets: on one PostgreSQL store the daemons answer one API token
// and derive E2B's envd tokens from one secret: the first daemon's are
// uploaded, a later daemon with secrets of its own takes the store's into
// its files (0600, which the CLI reads); on SQLite the files stay each
// daemon's own.
func TestSetSecrets(t *testing.T) {
	t.Parallel()
	pg := testenv.RequirePostgres(t)
	st, err := store.Open(t.Context(), pg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	secrets := func(cfg config.Config) (token, e2b string) {
		t.Helper()
		local, created, err := config.EnsureToken(cfg.TokenPath())
		if err != nil {
			t.Fatal(err)
		}
		token = local
		if store.IsPostgresURL(cfg.StoreTarget()) {
			if token, err = setSecret(t.Context(), st, settingAPIToken, cfg.TokenPath(), local, created, quiet); err != nil {
				t.Fatal(err)
			}
		}
		if e2b, err = e2bSecret(t.Context(), cfg, st, quiet); err != nil {
			t.Fatal(err)
		}
		return token, e2b
	}
	file := func(path string) string {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %04o, want 0600", path, fi.Mode().Perm())
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b[:len(b)-1])
	}

	// Alone on SQLite first: its own secrets.
	first := config.Config{DataDir: t.TempDir()}
	ownToken, ownE2B := secrets(first)
	other := config.Config{DataDir: t.TempDir()}
	otherToken, otherE2B := secrets(other)
	if ownToken == otherToken || ownE2B == otherE2B {
		t.Fatal("two daemons on SQLite share a secret")
	}
	// Onto the store: the first's are uploaded, the other takes them.
	first.Store, other.Store = pg, pg
	if tok, e2b := secrets(first); tok != ownToken || e2b != ownE2B {
		t.Errorf("the first daemon on the store: token and e2b secret changed, want its own uploaded")
	}
	tok, e2b := secrets(other)
	if tok != ownToken || e2b != ownE2B {
		t.Errorf("the second daemon on the store: want the first's token and e2b secret")
	}
	if got := file(other.TokenPath()); got != ownToken {
		t.Errorf("the second daemon's token file holds %q, want the set's", got)
	}
	if got := file(filepath.Join(other.DataDir, "e2b-secret")); got != ownE2B {
		t.Errorf("the second daemon's e2b-secret file holds another secret than the set's")
	}
	// A new daemon's fresh ones lose to the store's as well.
	fresh := config.Config{DataDir: t.TempDir(), Store: pg}
	if tok, e2b := secrets(fresh); tok != ownToken || e2b != ownE2B {
		t.Errorf("a new daemon on the store: want the set's token and e2b secret")
	}
}
