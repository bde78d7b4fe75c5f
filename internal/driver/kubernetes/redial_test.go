package kubernetes_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hotcell/hotcell/internal/agentauth"
	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/driver"
	"github.com/hotcell/hotcell/internal/wire"
)

// TestAgentRedialsAnotherDaemon: a pod's agent (this tree's agent image)
// with the dial file of a set of two daemons' listeners on the host (one
// material, both advertised) holds its session on the first; when the
// first closes its listener and the session, as a daemon that dies does,
// the agent redials the second, which had no route for the sandbox and
// takes it (OnUnknown, as Manager.AdoptRoute does), and an exec through
// the second reaches the pod. The second is never asked while the first
// holds the session.
func TestAgentRedialsAnotherDaemon(t *testing.T) {
	d, image, env := clusterDriverOn(t, false)
	m, err := agentauth.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	var lns []net.Listener
	var addrs []string
	for range 2 {
		ln, err := net.Listen("tcp", net.JoinHostPort(env.HostIP, "0"))
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		addrs = append(addrs, ln.Addr().String())
	}
	var chs []*agentconn.Channel
	for _, ln := range lns {
		ch := agentconn.NewChannel(ln, m, addrs, log)
		t.Cleanup(func() { ch.Close() })
		chs = append(chs, ch)
	}
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	id := randomID(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := d.Destroy(ctx, id); err != nil {
			t.Errorf("cleanup sandbox %s: %v", id, err)
		}
	})
	dir, err := os.MkdirTemp("", "rd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	spec := driver.Spec{ID: id, Image: image, Persist: true, Runtime: wire.RuntimeRunc, HostRunDir: dir,
		Instance: hex.EncodeToString(b), AgentDial: chs[0].Dial(id)}

	route := func(ch *agentconn.Channel) *agentconn.Conn {
		// Each daemon's own socket, which the pod never sees (no run
		// dir of the node's is mounted): the agent has only TCP.
		_, port, _ := net.SplitHostPort(ch.Addr().String())
		c, err := agentconn.Listen(id, filepath.Join(dir, port+".sock"), log)
		if err == nil {
			var ln net.Listener
			if ln, err = ch.Register(id); err == nil {
				err = c.AddListener(ln, true)
			}
		}
		if err != nil {
			t.Errorf("route %s: %v", id, err)
			return nil
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	first := route(chs[0])
	adopted := make(chan *agentconn.Conn, 1)
	var (
		mu    sync.Mutex
		asked []string
	)
	chs[1].OnUnknown = func(_ context.Context, got string) bool {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, got)
		if got != id || len(asked) > 1 {
			return false
		}
		c := route(chs[1])
		adopted <- c
		return c != nil
	}
	for _, ch := range chs {
		go ch.Serve()
	}

	ctx := t.Context()
	if err := d.Create(ctx, spec); err != nil {
		t.Fatal(err)
	}
	if err := d.Start(ctx, id); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := first.WaitReady(wctx); err != nil {
		t.Fatalf("the pod's agent did not reach the first daemon: %v", err)
	}
	exec := func(c *agentconn.Conn, what string) {
		t.Helper()
		var res wire.ExecResult
		if err := c.DoJSON(ctx, http.MethodPost, "/v1/exec", wire.ExecRequest{Command: "echo " + what}, &res); err != nil {
			t.Fatalf("exec through %s: %v", what, err)
		}
		if res.Stdout != what+"\n" {
			t.Fatalf("exec through %s: stdout %q", what, res.Stdout)
		}
	}
	exec(first, "first")

	chs[0].Close()
	first.Close()
	var second *agentconn.Conn
	select {
	case second = <-adopted:
	case <-wctx.Done():
		t.Fatal("the agent never reached the second daemon")
	}
	if second == nil {
		t.Fatal("the second daemon could not take the route")
	}
	if err := second.WaitReady(wctx); err != nil {
		t.Fatalf("the session on the second daemon: %v", err)
	}
	exec(second, "second")
	mu.Lock()
	defer mu.Unlock()
	if len(asked) != 1 {
		t.Errorf("the second daemon was asked %v, want once for %s", asked, id)
	}
}
