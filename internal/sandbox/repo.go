package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
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

// cloneInto clones repo with the host's git, in the network of the running
// box id (netns.go) whose resolvers are dns, and streams the tree, .git
// included, into the sandbox's workspace through the agent. Cloning with
// the host's git keeps git credentials out of the sandbox and needs no git
// in the image; the origin remote left behind has no credentials in it.
// Running it in the box's network puts it under the box's egress policy:
// the host fetches for a sandbox only what the sandbox could fetch itself.
func (m *Manager) cloneInto(ctx context.Context, id string, egress *wire.EgressPolicy, dns []netip.Addr, conn *agentconn.Conn, repo wire.Repo) (wire.RepoResult, error) {
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
	etc, err := os.MkdirTemp(tmpRoot, "etc-")
	if err != nil {
		return wire.RepoResult{}, fmt.Errorf("create temp dir: %w", err)
	}
	defer os.RemoveAll(etc)
	binds, err := netNSFiles(etc, dns)
	if err != nil {
		return wire.RepoResult{}, fmt.Errorf("write the clone's resolver files: %w", err)
	}
	ns, err := m.boxNetNS(ctx, id)
	if err != nil {
		return wire.RepoResult{}, err
	}
	defer ns.Close()
	g := gitRunner{env: gitEnv(home, m.opts.AllowLocalRepos), start: func(cmd *exec.Cmd) error { return startInNetNS(cmd, ns, binds) }}
	git := func(ctx context.Context, dir, rawURL string, args ...string) error {
		return g.run(ctx, dir, rawURL, args...)
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
			return fmt.Errorf("git did not finish within %s (the daemon's git_timeout): check that the remote answers from the sandbox's network (the clone runs under its egress policy), or raise --git-timeout (HOTCELL_GIT_TIMEOUT) for a very large repository: %w",
				m.opts.GitTimeout, errdefs.ErrDeadlineExceeded)
		}
		return err
	}
	if err := git(ctx, "", repo.URL, "clone", "--quiet", "--", repo.URL, dir); err != nil {
		if ctx.Err() != nil {
			return wire.RepoResult{}, fmt.Errorf("clone %s: %w", safe, timedOut(err))
		}
		// The URL the client gave cannot be cloned from where the sandbox
		// is: its fault to fix (the URL, or the sandbox's egress policy).
		return wire.RepoResult{}, errdefs.Invalid("repo.url", "clone %s: %v; the clone runs in the sandbox's network, under its egress policy (%s)", safe, err, egressHint(egress))
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
	out, err := g.output(ctx, dir, "rev-parse", "HEAD")
	if err != nil {
		return wire.RepoResult{}, fmt.Errorf("read cloned commit: %w", timedOut(err))
	}
	if err := putTree(outer, conn, dir, fspath.Workspace); err != nil {
		return wire.RepoResult{}, fmt.Errorf("copy clone of %s into sandbox: %w", safe, err)
	}
	return wire.RepoResult{URL: safe, Ref: repo.Ref, Commit: strings.TrimSpace(out)}, nil
}

// egressHint says what egress policy p lets a clone reach.
func egressHint(p *wire.EgressPolicy) string {
	switch {
	case p == nil:
		return "the engine's default network"
	case p.Mode == wire.EgressNone:
		return "mode none: no network; use mode open, or allowlist with the repository's host"
	case p.Mode == wire.EgressAllowlist:
		return "mode allowlist: only the hosts it allows"
	default:
		return "mode " + p.Mode + ": the internet, not the daemon's host or its loopback"
	}
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

// gitRunner runs git with env; start starts each command (in a box's
// network).
type gitRunner struct {
	env   []string
	start func(*exec.Cmd) error
}

// command is git in its own process group: git hands the network to
// helpers (git-remote-http, ssh) that hold its pipes, so the end of ctx
// kills them all, and Wait gives up on the pipes soon after.
func (g gitRunner) command(ctx context.Context, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	cmd.Env = g.env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	return cmd
}

func (g gitRunner) exec(cmd *exec.Cmd) error {
	if err := g.start(cmd); err != nil {
		return err
	}
	return cmd.Wait()
}

func (g gitRunner) run(ctx context.Context, dir, rawURL string, args ...string) error {
	cmd := g.command(ctx, dir, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := g.exec(cmd); err != nil {
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

func (g gitRunner) output(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := g.command(ctx, dir, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	err := g.exec(cmd)
	return out.String(), err
}

// putTree streams dir as a tar into the sandbox directory dst.
func putTree(ctx context.Context, conn *agentconn.Conn, dir, dst string) error {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(treetar.Write(pw, dir, nil)) }()
	err := conn.PutArchive(ctx, dst, pr, false)
	pr.CloseWithError(err) // the writer stops, whatever the answer
	return err
}
