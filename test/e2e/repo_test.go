package e2e

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestRepoCloneTimeout: a remote that accepts and never answers fails the
// create after the daemon's git timeout with an error that names it and
// what to do, leaves nothing behind, and the daemon goes on serving.
func TestRepoCloneTimeout(t *testing.T) {
	testenv.RequireTool(t, "git")
	testenv.RequireRoot(t, "the stalled remote is in a network namespace the test makes")
	// The clone runs in the sandbox's network: the remote is in the test
	// internet, which an open sandbox reaches.
	in := newInternet(t)
	silent := netip.AddrPortFrom(in.allowed, 8081)
	startRepoServer(t, in, "", nil, silent)
	d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{"--git-timeout", "3s", "--allow-local-repos"}})
	t.Cleanup(d.Close)
	ctx := t.Context()
	addr := silent.String()
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
