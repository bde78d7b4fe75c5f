package mcpserver

import (
	"context"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hotcell/hotcell/client"
)

type limitsIn struct {
	MemoryMB  int64   `json:"memoryMb,omitempty" jsonschema:"memory limit in MiB (at least a few MiB); 0 or absent means the daemon's default (GET /v1/host defaultLimits)"`
	CPUs      float64 `json:"cpus,omitempty" jsonschema:"CPU limit in cores, fractions allowed (0.5 = half a core); 0 or absent means the daemon's default"`
	PidsLimit int64   `json:"pidsLimit,omitempty" jsonschema:"maximum number of processes and threads; 0 or absent means the daemon's default"`
}

type repoIn struct {
	URL string `json:"url" jsonschema:"git repository to clone into /workspace: https://..., ssh://..., git://..., user@host:path, or an absolute path on the daemon's host"`
	Ref string `json:"ref,omitempty" jsonschema:"branch, tag or commit to check out; absent means the repository's default branch"`
}

type createIn struct {
	Image    string            `json:"image,omitempty" jsonschema:"container image, e.g. hotcell/base:latest (Debian with bash, python3, git, curl); absent means the daemon's default image"`
	Env      map[string]string `json:"env,omitempty" jsonschema:"environment variables for every command run in the sandbox"`
	Labels   map[string]string `json:"labels,omitempty" jsonschema:"free key/value labels, for finding the sandbox again with sandbox_list"`
	Limits   *limitsIn         `json:"limits,omitempty" jsonschema:"resource limits; absent fields take the daemon's defaults, fields above its maximum are refused"`
	Repo     *repoIn           `json:"repo,omitempty" jsonschema:"a git repository to clone into /workspace before the setup commands"`
	Setup    []string          `json:"setup,omitempty" jsonschema:"shell commands run in order in /workspace after the clone (e.g. 'pip install -r requirements.txt'); each one's exit code and output tail are in the result, and a failing one does not stop the sandbox from being created"`
	Runtime  string            `json:"runtime,omitempty" jsonschema:"isolation runtime: runc (the host's kernel) or gvisor (a user-space kernel between the sandbox and the host: stronger isolation, slower system calls); absent means the daemon's default"`
	Template string            `json:"template,omitempty" jsonschema:"make the sandbox from this template (built with hotcell template build): its image and default env, limits, runtime, egress and timeouts, under the fields given here; excludes image"`
}

type setupOut struct {
	Command    string `json:"command"`
	ExitCode   int    `json:"exitCode"`
	TimedOut   bool   `json:"timedOut,omitempty"`
	OutputTail string `json:"outputTail,omitempty" jsonschema:"the last few KiB of the command's stdout and stderr"`
}

type repoOut struct {
	URL    string `json:"url"`
	Ref    string `json:"ref,omitempty"`
	Commit string `json:"commit,omitempty" jsonschema:"the commit checked out"`
}

type sandboxOut struct {
	ID        string            `json:"id" jsonschema:"the sandbox id: pass it as sandboxId to the other tools"`
	State     string            `json:"state" jsonschema:"creating, running, stopped, paused, error or destroyed; commands run only in a running sandbox"`
	Image     string            `json:"image"`
	Runtime   string            `json:"runtime,omitempty" jsonschema:"the isolation runtime the sandbox runs under: runc or gvisor"`
	Template  string            `json:"template,omitempty" jsonschema:"the template and version the sandbox was made from, as name:version"`
	Labels    map[string]string `json:"labels,omitempty"`
	Repo      *repoOut          `json:"repo,omitempty"`
	Setup     []setupOut        `json:"setup,omitempty" jsonschema:"the setup commands run at create, in order"`
	Error     string            `json:"error,omitempty" jsonschema:"why the sandbox is in the error state"`
	CreatedAt string            `json:"createdAt"`
}

func sandboxFrom(sb client.Sandbox) sandboxOut {
	out := sandboxOut{
		ID: sb.ID, State: string(sb.State), Image: sb.Image, Runtime: sb.Runtime, Labels: sb.Labels,
		Error: sb.Error, CreatedAt: sb.CreatedAt.UTC().Format(time.RFC3339),
	}
	if sb.Template != nil {
		out.Template = fmt.Sprintf("%s:%d", sb.Template.Name, sb.Template.Version)
	}
	if sb.Repo != nil {
		out.Repo = &repoOut{URL: sb.Repo.URL, Ref: sb.Repo.Ref, Commit: sb.Repo.Commit}
	}
	for _, s := range sb.Setup {
		out.Setup = append(out.Setup, setupOut{Command: s.Command, ExitCode: s.ExitCode, TimedOut: s.TimedOut, OutputTail: s.OutputTail})
	}
	return out
}

type listIn struct {
	State  string            `json:"state,omitempty" jsonschema:"only sandboxes in this state; absent means all"`
	Labels map[string]string `json:"labels,omitempty" jsonschema:"only sandboxes that carry all of these labels"`
}

type listOut struct {
	Sandboxes []sandboxOut `json:"sandboxes"`
	Note      string       `json:"note,omitempty"`
}

// maxListed bounds sandbox_list's answer; filters narrow it.
const maxListed = 200

type idIn struct {
	SandboxID string `json:"sandboxId" jsonschema:"the sandbox id returned by sandbox_create or sandbox_list"`
}

type destroyOut struct {
	SandboxID string `json:"sandboxId"`
	Destroyed bool   `json:"destroyed"`
}

func (t *tools) registerSandboxes(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{
		Name:  "sandbox_create",
		Title: "Create a sandbox",
		Description: `Create an isolated Linux sandbox (a container with a persistent /workspace) and return it once it is ready to run commands.
Optionally clone a git repository into /workspace and run setup commands first; their exit codes and output tails are in the result.
The result's "id" is the sandboxId the other tools take. Sandboxes keep running until sandbox_destroy (or the daemon's idle timeout): destroy them when done.`,
		InputSchema: inputSchema[createIn](map[string]prop{"setup": maxItems(64), "runtime": enum(client.RuntimeRunc, client.RuntimeGVisor)}),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(false), OpenWorldHint: ptr(true)},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in createIn) (*mcp.CallToolResult, sandboxOut, error) {
		req := client.CreateSandboxRequest{Image: in.Image, Env: in.Env, Labels: in.Labels, Setup: in.Setup, Runtime: in.Runtime, Template: in.Template}
		if in.Limits != nil {
			req.Limits = client.Limits{MemoryMB: in.Limits.MemoryMB, CPUs: in.Limits.CPUs, PidsLimit: in.Limits.PidsLimit}
		}
		if in.Repo != nil {
			req.Repo = &client.Repo{URL: in.Repo.URL, Ref: in.Repo.Ref}
		}
		sb, err := t.c.CreateSandbox(ctx, req)
		if err != nil {
			return nil, sandboxOut{}, t.explain(err)
		}
		return nil, sandboxFrom(sb), nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "sandbox_list",
		Title:       "List sandboxes",
		Description: "List the daemon's sandboxes, newest last, optionally only those in one state or carrying given labels.",
		InputSchema: inputSchema[listIn](map[string]prop{"state": enum("creating", "running", "stopped", "paused", "error")}),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in listIn) (*mcp.CallToolResult, listOut, error) {
		sbs, err := t.c.ListSandboxes(ctx, client.ListOptions{State: client.State(in.State), Labels: in.Labels})
		if err != nil {
			return nil, listOut{}, t.explain(err)
		}
		out := listOut{Sandboxes: []sandboxOut{}}
		if len(sbs) > maxListed {
			out.Note = omittedCount(len(sbs)-maxListed, "sandboxes") + " (the oldest); narrow the list with state or labels"
			sbs = sbs[len(sbs)-maxListed:]
		}
		for _, sb := range sbs {
			o := sandboxFrom(sb)
			o.Setup = nil // in the list only the identity matters; sandbox_create had the details
			out.Sandboxes = append(out.Sandboxes, o)
		}
		return nil, out, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "sandbox_destroy",
		Title:       "Destroy a sandbox",
		Description: "Destroy a sandbox and everything in it (processes, files, /workspace). Destroying a sandbox that is already gone succeeds.",
		InputSchema: inputSchema[idIn](map[string]prop{"sandboxId": nonEmpty}),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in idIn) (*mcp.CallToolResult, destroyOut, error) {
		if err := t.c.DeleteSandbox(ctx, in.SandboxID); err != nil {
			return nil, destroyOut{}, t.explain(err)
		}
		return nil, destroyOut{SandboxID: in.SandboxID, Destroyed: true}, nil
	})
}
