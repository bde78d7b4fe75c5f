package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/hotcell/hotcell/internal/agentconn"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/fspath"
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
	safe := redactURL(repo.URL)
	if err := git(ctx, "", repo.URL, "clone", "--quiet", "--", repo.URL, dir); err != nil {
		return wire.RepoResult{}, fmt.Errorf("clone %s: %w", safe, err)
	}
	if repo.Ref != "" {
		if err := git(ctx, dir, repo.URL, "checkout", "--quiet", repo.Ref, "--"); err != nil {
			// Not a branch or tag name known locally: fetch it (a commit or
			// any other ref) and check out what was fetched.
			if ferr := git(ctx, dir, repo.URL, "fetch", "--quiet", "origin", repo.Ref); ferr != nil {
				return wire.RepoResult{}, fmt.Errorf("check out ref %q of %s: %w", repo.Ref, safe, errdefs.Invalid("repo.ref", "%v", err))
			}
			if err := git(ctx, dir, repo.URL, "checkout", "--quiet", "--detach", "FETCH_HEAD"); err != nil {
				return wire.RepoResult{}, fmt.Errorf("check out ref %q of %s: %w", repo.Ref, safe, err)
			}
		}
	}
	if err := git(ctx, dir, repo.URL, "remote", "set-url", "origin", safe); err != nil {
		return wire.RepoResult{}, fmt.Errorf("remove credentials from origin: %w", err)
	}
	out, err := gitOutput(ctx, dir, "rev-parse", "HEAD")
	if err != nil {
		return wire.RepoResult{}, fmt.Errorf("read cloned commit: %w", err)
	}
	if err := putTree(ctx, conn, dir, fspath.Workspace); err != nil {
		return wire.RepoResult{}, fmt.Errorf("copy clone of %s into sandbox: %w", safe, err)
	}
	return wire.RepoResult{URL: safe, Ref: repo.Ref, Commit: strings.TrimSpace(out)}, nil
}

// gitEnv keeps git from prompting and from running helper programs named in
// a URL (the ext:: transport would run a command on the host).
func gitEnv() []string {
	return append(os.Environ(),
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ALLOW_PROTOCOL=file:git:http:https:ssh",
		"GIT_CONFIG_NOSYSTEM=1",
	)
}

func git(ctx context.Context, dir, rawURL string, args ...string) error {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		// git may echo the URL it was given, credentials and all.
		if rawURL != "" {
			msg = strings.ReplaceAll(msg, rawURL, redactURL(rawURL))
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

func gitOutput(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = gitEnv()
	out, err := cmd.Output()
	return string(out), err
}

// redactURL drops the user info (tokens, passwords) from a repository URL.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
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
