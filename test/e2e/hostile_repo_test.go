package e2e

import (
	"errors"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testdaemon"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestHostileRepoLocalPath: a create that names a repository on the
// daemon's host (a path or a file:// URL) is a 400 naming repo.url and the
// setting that would allow it, and leaves no sandbox behind, on a daemon
// that did not opt in to local repositories.
func TestHostileRepoLocalPath(t *testing.T) {
	testenv.RequireTool(t, "git")
	d := testdaemon.Start(t)
	t.Cleanup(d.Close)
	ctx := t.Context()
	repo := makeRepo(t)
	for _, url := range []string{repo, "file://" + repo, "/root", "file:///etc"} {
		_, err := d.C.CreateSandbox(ctx, client.CreateSandboxRequest{Repo: &client.Repo{URL: url}})
		var ae *client.APIError
		if !errors.As(err, &ae) || ae.Status != http.StatusBadRequest {
			t.Fatalf("create with repo %q: got %v, want a 400", url, err)
		}
		for _, want := range []string{"repo.url", "allow_local_repos"} {
			if !strings.Contains(ae.Message, want) {
				t.Errorf("create with repo %q: message %q does not name %s", url, ae.Message, want)
			}
		}
	}
	list, err := d.C.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Errorf("refused creates left sandboxes behind: %+v", list)
	}
}

// TestHostileRepoCleanGitEnv: the host-side clone does not read the
// daemon's ~/.gitconfig. The daemon's HOME holds a gitconfig whose
// insteadOf rewrite would send the clone of repo A to repo B (as a planted
// credential helper or proxy would apply to it); the sandbox gets A.
func TestHostileRepoCleanGitEnv(t *testing.T) {
	testenv.RequireTool(t, "git")
	good := makeRepo(t)
	evil := makeRepo(t)
	work := filepath.Join(t.TempDir(), "work")
	gitRun(t, "clone", "-q", evil, work)
	if err := os.WriteFile(filepath.Join(work, "README.md"), []byte("planted by the daemon's gitconfig\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	gitRun(t, "-C", work, "commit", "-qam", "evil")
	gitRun(t, "-C", work, "push", "-q", "origin", "main")

	home := t.TempDir()
	cfg := "[url \"" + evil + "\"]\n\tinsteadOf = " + good + "\n"
	if err := os.WriteFile(filepath.Join(home, ".gitconfig"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	// The rewrite works for a git that reads this HOME: the test's premise.
	out, err := gitCmd(t, []string{"HOME=" + home}, "ls-remote", good, "refs/heads/main").Output()
	if err != nil {
		t.Fatalf("git ls-remote with the planted HOME: %v", err)
	}
	evilHead, err := gitCmd(t, nil, "ls-remote", evil, "refs/heads/main").Output()
	if err != nil || string(out) != string(evilHead) {
		t.Fatalf("planted insteadOf does not redirect a git that reads it: %q vs %q (%v)", out, evilHead, err)
	}

	d := testdaemon.StartWith(t, testdaemon.Options{
		Args: []string{"--allow-local-repos"},
		Env:  []string{"HOME=" + home, "XDG_CONFIG_HOME=" + home},
	})
	t.Cleanup(d.Close)
	sb := newSandbox(t, d, client.CreateSandboxRequest{Repo: &client.Repo{URL: good}})
	got := mustOK(t, run(t, d, sb.ID, "cat README.md"), "read clone")
	if strings.Contains(got, "planted") || !strings.Contains(got, "version two") {
		t.Fatalf("workspace README.md: got %q, want the good repository's %q", got, "version two")
	}
}

// gitCmd is git with a committer identity and env added to the test's own
// environment.
func gitCmd(t *testing.T, env []string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
	cmd.Env = append(cmd.Env, env...)
	return cmd
}

func gitRun(t *testing.T, args ...string) {
	t.Helper()
	if out, err := gitCmd(t, nil, args...).CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}

// hostService is an HTTP service of the daemon's host that counts the
// requests it gets, on each of addrs (port 0: any free port).
type hostService struct {
	hits  atomic.Int64
	addrs []string // where it listens, host:port
}

func newHostService(t *testing.T, addrs ...netip.Addr) *hostService {
	t.Helper()
	s := &hostService{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		http.Error(w, "host service", http.StatusNotFound)
	})}
	for _, a := range addrs {
		ln, err := net.Listen("tcp", netip.AddrPortFrom(a, 0).String())
		if err != nil {
			t.Fatal(err)
		}
		s.addrs = append(s.addrs, ln.Addr().String())
		go func() { _ = srv.Serve(ln) }()
	}
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

// TestHostileRepoSSRF: repo.url names a service of the daemon's host (on its
// loopback, or on its address on the egress network), a server on a private
// network (a LAN host) or a server that the sandbox's egress policy does not
// let it reach. The clone runs in the
// sandbox's network under its policy: the host's services get no request,
// egress none clones nothing, an allowlist clones only from the hosts it
// allows (by name through the sandbox's resolver), and the same server is
// cloned from in mode open. Each refused create fails naming the egress
// policy (a 400 naming repo.url, or a 504 when the rules drop the
// connection) and leaves no sandbox.
func TestHostileRepoSSRF(t *testing.T) {
	testenv.RequireTool(t, "git")
	testenv.RequireRoot(t, "the test makes a network namespace")
	in := newInternet(t)
	bare := makeRepo(t)
	gitAddr := netip.AddrPortFrom(in.allowed, 8080)
	// The same server on a private address (a LAN host), routed to the
	// test's namespace.
	lanAddr := netip.AddrPortFrom(in.private, 8080)
	srv := startRepoServer(t, in, filepath.Dir(bare), []netip.AddrPort{gitAddr, lanAddr}, netip.AddrPort{})
	remote := "http://" + gitAddr.String() + "/" + filepath.Base(bare)
	up := newUpstream(t, map[string]netip.Addr{"git.test": in.allowed})
	// A dropped connection stalls the clone until the git timeout: short
	// here, long enough for the clones that work.
	d := testdaemon.StartWith(t, testdaemon.Options{Args: []string{"--egress-dns-upstream", up.addr, "--git-timeout", "10s"}})
	t.Cleanup(d.Close)
	ctx := t.Context()
	gateway := d.EgressSubnet.Addr().Next()
	host := newHostService(t, netip.MustParseAddr("127.0.0.1"), gateway)

	// The premise: a git on the host does reach the host's services.
	for _, a := range host.addrs {
		_ = gitCmd(t, nil, "ls-remote", "http://"+a+"/x.git").Run()
	}
	if n := host.hits.Load(); n < int64(len(host.addrs)) {
		t.Fatalf("the host's git reached the host services %d times, want at least %d", n, len(host.addrs))
	}
	host.hits.Store(0)

	refused := func(what string, req client.CreateSandboxRequest) {
		t.Helper()
		sb, err := d.C.CreateSandbox(ctx, req)
		if err == nil {
			_ = d.C.DeleteSandbox(ctx, sb.ID)
			t.Errorf("%s: the clone of %s succeeded", what, req.Repo.URL)
			return
		}
		// A connection the egress rules drop stalls until the git timeout.
		var ae *client.APIError
		if !errors.As(err, &ae) || (ae.Status != http.StatusBadRequest && ae.Status != http.StatusGatewayTimeout) || !strings.Contains(ae.Message, "egress") {
			t.Errorf("%s: got %v, want a 400 (or a 504 when the connection is dropped) naming the egress policy", what, err)
		}
		if ae != nil && ae.Status == http.StatusBadRequest && !strings.Contains(ae.Message, "repo.url") {
			t.Errorf("%s: message %q does not name repo.url", what, ae.Message)
		}
	}
	_, port, _ := net.SplitHostPort(host.addrs[0])
	refused("open, host loopback", client.CreateSandboxRequest{Repo: &client.Repo{URL: "http://" + host.addrs[0] + "/x.git"}})
	refused("open, localhost", client.CreateSandboxRequest{Repo: &client.Repo{URL: "http://localhost:" + port + "/x.git"}})
	refused("open, host's gateway address", client.CreateSandboxRequest{Repo: &client.Repo{URL: "http://" + host.addrs[1] + "/x.git"}})
	if n := host.hits.Load(); n != 0 {
		t.Errorf("the host's services got %d requests from creates", n)
	}

	refused("open, private network", client.CreateSandboxRequest{Repo: &client.Repo{URL: "http://" + lanAddr.String() + "/" + filepath.Base(bare)}})
	refused("egress none", client.CreateSandboxRequest{Repo: &client.Repo{URL: remote}, Egress: &client.EgressPolicy{Mode: "none"}})
	refused("allowlist of another host", client.CreateSandboxRequest{Repo: &client.Repo{URL: remote}, Egress: &client.EgressPolicy{Allow: []string{in.other.String()}}})
	if got := srv.requests(t); len(got) != 0 {
		t.Errorf("the repository server got requests from refused creates: %q", got)
	}
	list, err := d.C.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Errorf("refused creates left sandboxes behind: %+v", list)
	}

	// What the policy allows is cloned: by name through the sandbox's
	// resolver under an allowlist of that name, and in mode open.
	for _, c := range []struct {
		what string
		req  client.CreateSandboxRequest
	}{
		{"allowlist by name", client.CreateSandboxRequest{Repo: &client.Repo{URL: "http://git.test:8080/" + filepath.Base(bare)}, Egress: &client.EgressPolicy{Allow: []string{"git.test"}}}},
		{"open", client.CreateSandboxRequest{Repo: &client.Repo{URL: remote}}},
	} {
		sb := newSandbox(t, d, c.req)
		if got := mustOK(t, run(t, d, sb.ID, "cat README.md"), c.what+": read clone"); got != "version two\n" {
			t.Errorf("%s: README.md %q, want the repository's", c.what, got)
		}
	}
	if got := srv.requests(t); len(got) == 0 {
		t.Errorf("the repository server saw no request from the clones that worked")
	}
}
