package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/fspath"
	"github.com/hotcell/hotcell/internal/redact"
	"github.com/hotcell/hotcell/internal/treetar"
	"github.com/hotcell/hotcell/internal/wire"
)

// cloneInto clones repo on the host and streams the tree, .git included,
// into the sandbox's workspace through the agent. Cloning on the host keeps
// git credentials out of the sandbox and needs no git in the image; the
// origin remote left behind has no credentials in it.
func (m *Manager) cloneInto(ctx context.Context, conn *agentconn.Conn, repo wire.Repo) (wire.RepoResult, error) {
	tmpRoot := filepath.Join(m.opts.DataDir, "tmp")
	if err := os.MkdirAll(tmpRoot, 0o700); err != nil {
		return wire.RepoResult{}, fmt.Errorf("create temp dir: %w", err)
	}
	dir, err := os.MkdirTemp(tmpRoot, "clone-")
	if err != nil {
		return wire.RepoResult{}, fmt.Errorf("create temp dir: %w", err)
	}
	defer os.RemoveAll(dir)
	home, err := os.MkdirTemp(tmpRoot, "home-")
	if err != nil {
		return wire.RepoResult{}, fmt.Errorf("create temp dir: %w", err)
	}
	defer os.RemoveAll(home)
	env := gitEnv(home, m.opts.AllowLocalRepos)
	git := func(ctx context.Context, dir, rawURL string, args ...string) error {
		return runGit(ctx, env, dir, rawURL, args...)
	}
	safe := redact.URLWithoutUserinfo(repo.URL)
	// The host-side git work has its own deadline: a remote that accepts
	// and never answers must fail the create, not hold it (and its lock)
	// forever. Copying the tree into the box is not git's and is not bound.
	outer := ctx
	ctx, cancel := context.WithTimeout(ctx, m.opts.GitTimeout)
	defer cancel()
	timedOut := func(err error) error {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && outer.Err() == nil {
			return fmt.Errorf("git did not finish within %s (the daemon's git_timeout): check that the remote answers from the daemon's host, or raise --git-timeout (HOTCELL_GIT_TIMEOUT) for a very large repository: %w",
				m.opts.GitTimeout, errdefs.ErrDeadlineExceeded)
		}
		return err
	}
	if err := git(ctx, "", repo.URL, "clone", "--quiet", "--", repo.URL, dir); err != nil {
		return wire.RepoResult{}, fmt.Errorf("clone %s: %w", safe, timedOut(err))
	}
	if repo.Ref != "" {
		if err := git(ctx, dir, repo.URL, "checkout", "--quiet", repo.Ref, "--"); err != nil {
			// Not a branch or tag name known locally: fetch it (a commit or
			// any other ref) and check out what was fetched.
			if ferr := git(ctx, dir, repo.URL, "fetch", "--quiet", "origin", repo.Ref); ferr != nil {
				if ctx.Err() != nil {
					return wire.RepoResult{}, fmt.Errorf("fetch ref %q of %s: %w", repo.Ref, safe, timedOut(ferr))
				}
				return wire.RepoResult{}, fmt.Errorf("check out ref %q of %s: %w", repo.Ref, safe, errdefs.Invalid("repo.ref", "%v", err))
			}
			if err := git(ctx, dir, repo.URL, "checkout", "--quiet", "--detach", "FETCH_HEAD"); err != nil {
				return wire.RepoResult{}, fmt.Errorf("check out ref %q of %s: %w", repo.Ref, safe, timedOut(err))
			}
		}
	}
	if err := git(ctx, dir, repo.URL, "remote", "set-url", "origin", safe); err != nil {
		return wire.RepoResult{}, fmt.Errorf("remove credentials from origin: %w", timedOut(err))
	}
	out, err := gitOutput(ctx, env, dir, "rev-parse", "HEAD")
	if err != nil {
		return wire.RepoResult{}, fmt.Errorf("read cloned commit: %w", timedOut(err))
	}
	if err := putTree(outer, conn, dir, fspath.Workspace); err != nil {
		return wire.RepoResult{}, fmt.Errorf("copy clone of %s into sandbox: %w", safe, err)
	}
	return wire.RepoResult{URL: safe, Ref: repo.Ref, Commit: strings.TrimSpace(out)}, nil
}

// gitEnv is the whole environment of the host-side git: the daemon's own
// (root's HOME, its ~/.gitconfig with credential helpers and insteadOf
// rewrites, ~/.ssh keys, proxies, GIT_* settings) is not passed on, so a
// clone uses only what its URL carries. home is an empty directory. It also
// keeps git from prompting (for a password, or ssh for a host key or
// passphrase: the daemon has no terminal, and a prompt would wait until the
// timeout) and from running helper programs named in a URL (the ext::
// transport would run a command on the host). allowLocal adds the file
// transport, which is otherwise refused here as well as by the API.
func gitEnv(home string, allowLocal bool) []string {
	protocols := "git:http:https:ssh"
	if allowLocal {
		protocols = "file:" + protocols
	}
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	return []string{
		"PATH=" + path,
		"HOME=" + home,
		"LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ASKPASS=",
		"SSH_ASKPASS=",
		"GIT_SSH_COMMAND=ssh -o BatchMode=yes",
		"GIT_ALLOW_PROTOCOL=" + protocols,
	}
}

// gitCommand runs git in its own process group: git hands the network to
// helpers (git-remote-http, ssh) that hold its pipes, so the end of ctx
// kills them all, and Wait gives up on the pipes soon after.
func gitCommand(ctx context.Context, env []string, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

func runGit(ctx context.Context, env []string, dir, rawURL string, args ...string) error {
	cmd := gitCommand(ctx, env, dir, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		// git may echo the URL it was given, credentials and all.
		if rawURL != "" {
			msg = strings.ReplaceAll(msg, rawURL, redact.URL(rawURL))
		}
		if len(msg) > 2000 {
			msg = msg[len(msg)-2000:]
		}
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("git %s: %s", args[0], msg)
	}
	return nil
}

func gitOutput(ctx context.Context, env []string, dir string, args ...string) (string, error) {
	cmd := gitCommand(ctx, env, dir, args...)
	out, err := cmd.Output()
	return string(out), err
}

// putTree streams dir as a tar into the sandbox directory dst.
func putTree(ctx context.Context, conn *agentconn.Conn, dir, dst string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(treetar.Write(pw, dir, nil)) }()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://agent/v1/archive?path="+url.QueryEscape(dst), pr)
	if err != nil {
		pr.Close()
		return err
	}
	req.Header.Set("Content-Type", "application/x-tar")
	resp, err := conn.Do(req)
	if err != nil {
		pr.CloseWithError(err)
		return err
	}
	defer resp.Body.Close()
	pr.Close()
	if resp.StatusCode/100 != 2 {
		return errdefs.Read(resp)
	}
	return nil
}
