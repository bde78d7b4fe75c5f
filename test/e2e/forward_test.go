package e2e

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/api"
	"github.com/hotcell/hotcell/internal/daemon"
	"github.com/hotcell/hotcell/internal/store"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestForwardingToTheHoldingDaemon: calls for a sandbox sent to a daemon
// that does not hold its agent session reach the real `hotcell serve`
// on PostgreSQL that does, whole: an exec, a streamed exec, an 8 MiB file
// up and down, an interactive terminal over WebSocket. The forwarding
// daemon is daemon.Forwarding in this process on the same store (a
// second serve on one store is item 5 of docs/kubernetes.md's "Several
// daemons on one store"); its own API answers 418, so a call it did not
// forward shows. The mark X-Hotcell-Forwarded grants nothing: without the
// token a forwarded call, and a marked call sent straight to the holder,
// are refused, and a Host the holder does not answer is refused through
// the forwarder too.
func TestForwardingToTheHoldingDaemon(t *testing.T) {
	t.Parallel()
	pg := testenv.RequirePostgres(t)
	a := testdaemon.StartWith(t, testdaemon.Options{Store: pg})
	t.Cleanup(a.Close)
	sb := newSandbox(t, a, client.CreateSandboxRequest{})
	ctx := t.Context()

	st, err := store.Open(ctx, pg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if h, ok, err := st.SessionHolder(ctx, sb.ID); err != nil || !ok || !strings.HasSuffix(h.URL, a.Addr) {
		t.Fatalf("the registry's holder of %s: %+v, %v, %v, want the daemon at %s", sb.ID, h, ok, err, a.Addr)
	}
	fwd := daemon.Forwarding{
		Self:       "e2e-forwarder",
		SandboxOf:  api.New(api.Options{}).SandboxOf,
		HasSession: func(string) bool { return false },
		Holders:    st,
		Log:        slog.New(slog.DiscardHandler),
	}
	b := httptest.NewServer(fwd.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "served by the forwarder itself", http.StatusTeapot)
	})))
	t.Cleanup(b.Close)
	tok, err := os.ReadFile(filepath.Join(a.DataDir, "token"))
	if err != nil {
		t.Fatal(err)
	}
	viaB, err := client.New(b.URL, strings.TrimSpace(string(tok)))
	if err != nil {
		t.Fatal(err)
	}

	res, err := viaB.Exec(ctx, sb.ID, client.ExecRequest{Command: "echo forwarded; echo err >&2; exit 3"})
	if err != nil || res.Stdout != "forwarded\n" || res.Stderr != "err\n" || res.ExitCode != 3 {
		t.Fatalf("exec through the forwarder: %+v, %v, want stdout forwarded, stderr err, exit 3", res, err)
	}

	es, err := viaB.ExecStream(ctx, sb.ID, client.ExecRequest{Command: "for i in 1 2 3 4 5; do echo line$i; sleep 0.1; done"})
	if err != nil {
		t.Fatalf("streamed exec through the forwarder: %v", err)
	}
	var out strings.Builder
	for {
		ev, err := es.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("streamed exec: %v", err)
		}
		out.Write(ev.Data)
	}
	if exit, err := es.Wait(); err != nil || exit.ExitCode != 0 || out.String() != "line1\nline2\nline3\nline4\nline5\n" {
		t.Errorf("streamed exec: output %q, exit %+v, %v, want five lines and exit 0", out.String(), exit, err)
	}

	data := make([]byte, 8<<20)
	rand.NewChaCha8([32]byte{7}).Read(data)
	if _, err := viaB.WriteFile(ctx, sb.ID, "/workspace/blob", bytes.NewReader(data), 0o644); err != nil {
		t.Fatalf("upload through the forwarder: %v", err)
	}
	for name, c := range map[string]*client.Client{"the forwarder": viaB, "the holder": a.C} {
		rc, err := c.ReadFile(ctx, sb.ID, "/workspace/blob", nil)
		if err != nil {
			t.Fatalf("download through %s: %v", name, err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || sha256.Sum256(got) != sha256.Sum256(data) {
			t.Errorf("download through %s: %d bytes, %v, want the 8 MiB uploaded", name, len(got), err)
		}
	}

	term, err := viaB.OpenTerminal(ctx, sb.ID, client.TerminalOptions{Command: "cat"})
	if err != nil {
		t.Fatalf("terminal through the forwarder: %v", err)
	}
	defer term.Close()
	if _, err := term.Write([]byte("through-the-websocket\n")); err != nil {
		t.Fatalf("terminal write: %v", err)
	}
	var echoed []byte
	buf := make([]byte, 256)
	deadline := time.Now().Add(30 * time.Second)
	for !bytes.Contains(echoed, []byte("through-the-websocket")) && time.Now().Before(deadline) {
		n, err := term.Read(buf)
		echoed = append(echoed, buf[:n]...)
		if err != nil {
			break
		}
	}
	if !bytes.Contains(echoed, []byte("through-the-websocket")) {
		t.Errorf("terminal: got %q, want the line cat echoed", echoed)
	}

	// The mark grants nothing: no token, no call.
	noTok, err := client.New(b.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noTok.Exec(ctx, sb.ID, client.ExecRequest{Command: "true"}); !errors.Is(err, client.ErrUnauthenticated) {
		t.Errorf("exec through the forwarder without the token: got %v, want unauthenticated (from the holder)", err)
	}
	// Nor does the hop launder a Host: the holder checks the client's
	// (DNS rebinding, docs/security.md), right token or not.
	rebound, err := http.NewRequestWithContext(ctx, "POST", b.URL+"/v1/sandboxes/"+sb.ID+"/exec", strings.NewReader(`{"command":"true"}`))
	if err != nil {
		t.Fatal(err)
	}
	rebound.Host = "attacker.example"
	rebound.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	resp, err := http.DefaultClient.Do(rebound)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a call naming attacker.example in Host through the forwarder: got %d, want 403 from the holder", resp.StatusCode)
	}
	req, err := http.NewRequestWithContext(ctx, "POST", "http://"+a.Addr+"/v1/sandboxes/"+sb.ID+"/exec", strings.NewReader(`{"command":"true"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(daemon.ForwardedHeader, "e2e-forwarder")
	req.Header.Set("Authorization", "Bearer not-the-token")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a call marked forwarded with a wrong token, straight to the holder: got %d, want 401", resp.StatusCode)
	}
}
