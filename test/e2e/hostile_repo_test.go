package e2e

import (
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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
