package e2e

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// silentServer accepts TCP connections on loopback and never answers: a
// remote that stalls a git clone.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		wg.Wait()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// TestRepoCloneTimeout: a remote that accepts and never answers fails the
// create after the daemon's git timeout with an error that names it and
// what to do, leaves nothing behind, and the daemon goes on serving.
func TestRepoCloneTimeout(t *testing.T) {
	testenv.RequireTool(t, "git")
	d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{"--git-timeout", "3s", "--allow-local-repos"}})
	t.Cleanup(d.Close)
	ctx := t.Context()
	addr := silentServer(t)
	for _, url := range []string{"git://" + addr + "/x", "http://" + addr + "/x.git"} {
		_, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Repo: &client.Repo{URL: url}})
		var ae *client.APIError
		if !errors.As(err, &ae) {
			t.Fatalf("create with stalled remote %s: got %v, want an API error\n%s", url, err, d.Logs())
		}
		if ae.Status != http.StatusGatewayTimeout {
			t.Errorf("create with stalled remote %s: got status %d (%s), want %d", url, ae.Status, ae.Message, http.StatusGatewayTimeout)
		}
		for _, want := range []string{url, "within 3s", "git_timeout", "--git-timeout"} {
			if !strings.Contains(ae.Message, want) {
				t.Errorf("create with stalled remote: message %q does not say %q", ae.Message, want)
			}
		}
	}
	list, err := d.C.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Errorf("failed creates left sandboxes behind: %+v", list)
	}
	// The daemon is still usable: a create from a remote that answers works.
	repo := makeRepo(t)
	sb := newSandbox(t, d, client.CreateSandboxRequest{Repo: &client.Repo{URL: repo}})
	if sb.Repo == nil || sb.Repo.Commit == "" {
		t.Errorf("create after the stalled ones: repo result %+v", sb.Repo)
	}
}
