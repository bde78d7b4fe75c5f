package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/termsafe"
)

func (a *app) createCmd() *cobra.Command {
	var (
		image, repo, ref   string
		runtime            string
		template           string
		env, labels, setup []string
		memory, pids       int64
		cpus               float64
		noPersist, asJSON  bool
		showProgress       bool
		setupTimeout       time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create [flags]",
		Short: "Create a sandbox and print its id",
		Long: `Create a sandbox and wait until it is ready to run commands: the image is
prepared, the repository (if any) is cloned into /workspace, and the setup
commands have run. Prints the new sandbox's id, or the sandbox as JSON with --json.`,
		Example: `  hotcell create
  hotcell create --image hotcell/base:latest --memory 2048 --cpus 2 --label agent=demo
  hotcell create --repo https://github.com/org/repo.git --ref main --setup 'make deps'
  hotcell create --runtime gvisor`,
		Args: requireArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := client.CreateSandboxRequest{
				Image:          image,
				Runtime:        runtime,
				Template:       template,
				Limits:         client.Limits{MemoryMB: memory, CPUs: cpus, PidsLimit: pids},
				Setup:          setup,
				SetupTimeoutMs: setupTimeout.Milliseconds(),
			}
			var err error
			if req.Env, err = parseKV("env", env); err != nil {
				return err
			}
			if req.Labels, err = parseKV("label", labels); err != nil {
				return err
			}
			req.Gateway, _ = cmd.Flags().GetStringArray("gateway")
			if noPersist {
				f := false
				req.Persist = &f
			}
			if ref != "" && repo == "" {
				return usagef("--ref needs --repo")
			}
			if repo != "" {
				req.Repo = &client.Repo{URL: repo, Ref: ref}
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			var sb client.Sandbox
			// Progress goes to stderr so that stdout stays the id alone.
			if showProgress || isTTY(a.stderr) {
				sb, err = c.CreateSandboxProgress(cmd.Context(), req, func(msg string) { fmt.Fprintln(a.stderr, termsafe.String(msg)) })
			} else {
				sb, err = c.CreateSandbox(cmd.Context(), req)
			}
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(sb)
			}
			fmt.Fprintln(a.stdout, sb.ID)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&image, "image", "", "image to run (default: the daemon's default image)")
	f.StringVar(&template, "template", "", "make it from template `NAME` (hotcell template ls): its image and defaults, under this command's flags; excludes --image")
	f.StringVar(&runtime, "runtime", "", "isolation `RUNTIME`: runc (the host's kernel) or gvisor (gVisor's user-space kernel; stronger isolation, slower system calls) (default: the daemon's, see hotcell serve --default-runtime)")
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable `KEY=VALUE` for every command (repeatable)")
	f.StringArrayVarP(&labels, "label", "l", nil, "label `KEY=VALUE` to find the sandbox by (repeatable)")
	f.Int64Var(&memory, "memory", 0, "memory limit in `MiB` (0: the daemon's default, see hotcell serve --default-limits)")
	f.Float64Var(&cpus, "cpus", 0, "CPU limit, e.g. 1.5 (0: the daemon's default)")
	f.Int64Var(&pids, "pids", 0, "limit on the number of processes (0: the daemon's default)")
	f.BoolVar(&noPersist, "no-persist", false, "do not keep /workspace in a volume")
	f.StringVar(&repo, "repo", "", "git repository `URL` to clone into /workspace")
	f.StringVar(&ref, "ref", "", "branch, tag or commit of --repo")
	f.StringArrayVar(&setup, "setup", nil, "shell `COMMAND` to run after the clone (repeatable, in order)")
	f.DurationVar(&setupTimeout, "setup-timeout", 0, "timeout of each setup command (0: the daemon's default)")
	f.BoolVar(&asJSON, "json", false, "print the sandbox as JSON")
	f.BoolVar(&showProgress, "progress", false, "print what the daemon is doing (image pull, clone, setup) to stderr; the default on a terminal")
	f.StringArray("gateway", nil, "LLM gateway `PROVIDER` the sandbox may call with a token of its own (repeatable; hotcell gateway providers)")
	return cmd
}

func (a *app) lsCmd() *cobra.Command {
	var (
		state         string
		labels        []string
		asJSON, quiet bool
	)
	cmd := &cobra.Command{
		Use:     "ls [flags]",
		Aliases: []string{"list"},
		Short:   "List sandboxes",
		Long:    `List sandboxes, optionally only those in one state or carrying all the given labels.`,
		Example: `  hotcell ls
  hotcell ls --state running --label agent=demo
  hotcell rm $(hotcell ls -q --label run=42)`,
		Args: requireArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			lm, err := parseKV("label", labels)
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			list, err := c.ListSandboxes(cmd.Context(), client.ListOptions{State: client.State(state), Labels: lm})
			if err != nil {
				return err
			}
			switch {
			case asJSON:
				if list == nil {
					list = []client.Sandbox{}
				}
				return a.printJSON(client.SandboxList{Sandboxes: list})
			case quiet:
				for _, sb := range list {
					fmt.Fprintln(a.stdout, sb.ID)
				}
				return nil
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 3, ' ', 0)
			fmt.Fprintln(tw, "ID\tSTATE\tIMAGE\tRUNTIME\tCREATED\tLABELS")
			now := time.Now()
			for _, sb := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", sb.ID, sb.State, termsafe.String(sb.Image), termsafe.String(sb.Runtime), ago(now, sb.CreatedAt), termsafe.String(formatKV(sb.Labels)))
			}
			return tw.Flush()
		},
	}
	f := cmd.Flags()
	f.StringVar(&state, "state", "", "only sandboxes in this state (creating, running, stopped, paused, error)")
	f.StringArrayVarP(&labels, "label", "l", nil, "only sandboxes with label `KEY=VALUE` (repeatable: all must match)")
	f.BoolVar(&asJSON, "json", false, "print the list as JSON")
	f.BoolVarP(&quiet, "quiet", "q", false, "print only the ids")
	return cmd
}

func (a *app) inspectCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "inspect ID",
		Short: "Show one sandbox in detail",
		Long:  `Show a sandbox's state, image, limits, labels, repository and setup results.`,
		Example: `  hotcell inspect sb-3f9a1c2b7d4e
  hotcell inspect --json sb-3f9a1c2b7d4e | jq .state`,
		Args: requireArgs(1, 1, "one sandbox ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			sb, err := c.GetSandbox(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(sb)
			}
			a.printSandbox(sb)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the sandbox as JSON")
	return cmd
}

func (a *app) printSandbox(sb client.Sandbox) {
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, termsafe.String(v)) }
	row("ID", sb.ID)
	row("State", string(sb.State))
	if sb.Error != "" {
		row("Error", sb.Error)
	}
	row("Image", sb.Image)
	if sb.Template != nil {
		row("Template", fmt.Sprintf("%s version %d", sb.Template.Name, sb.Template.Version))
	}
	row("Runtime", sb.Runtime)
	row("Created", fmt.Sprintf("%s (%s)", sb.CreatedAt.Local().Format(time.RFC3339), ago(time.Now(), sb.CreatedAt)))
	row("Persist", fmt.Sprint(sb.Persist))
	row("Limits", formatLimits(sb.Limits))
	row("Labels", formatKV(sb.Labels))
	// Values may be secrets handed to the sandbox; --json shows them.
	row("Env", strings.Join(slices.Sorted(maps.Keys(sb.Env)), ", "))
	if sb.Repo != nil {
		r := sb.Repo.URL
		if sb.Repo.Ref != "" {
			r += " " + sb.Repo.Ref
		}
		if sb.Repo.Commit != "" {
			r += " @ " + sb.Repo.Commit
		}
		row("Repo", r)
	}
	for i, s := range sb.Setup {
		res := fmt.Sprintf("exit %d", s.ExitCode)
		if s.TimedOut {
			res = "timed out"
		}
		row(fmt.Sprintf("Setup %d", i+1), fmt.Sprintf("%s in %s: %s", res, time.Duration(s.DurationMs)*time.Millisecond, s.Command))
	}
	tw.Flush()
}

func formatLimits(l client.Limits) string {
	var parts []string
	if l.MemoryMB > 0 {
		parts = append(parts, fmt.Sprintf("memory %d MB", l.MemoryMB))
	}
	if l.CPUs > 0 {
		parts = append(parts, fmt.Sprintf("cpus %g", l.CPUs))
	}
	if l.PidsLimit > 0 {
		parts = append(parts, fmt.Sprintf("pids %d", l.PidsLimit))
	}
	if l.DiskMB > 0 {
		parts = append(parts, fmt.Sprintf("disk %d MB", l.DiskMB))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func formatKV(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

// ago renders t relative to now the way people read it in a table.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%d seconds ago", int(d.Seconds()))
	case d < 2*time.Minute:
		return "1 minute ago"
	case d < time.Hour:
		return fmt.Sprintf("%d minutes ago", int(d.Minutes()))
	case d < 2*time.Hour:
		return "1 hour ago"
	case d < 48*time.Hour:
		return fmt.Sprintf("%d hours ago", int(d.Hours()))
	default:
		return fmt.Sprintf("%d days ago", int(d.Hours()/24))
	}
}

func (a *app) rmCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID...",
		Aliases: []string{"delete"},
		Short:   "Destroy sandboxes",
		Long: `Destroy sandboxes: their containers, workspaces and state. Each answer comes
once the sandbox is gone for everyone (not found, its processes killed, its
firewall rules and gateway tokens removed); the daemon removes its container
and workspace right after, in the background. Removing a sandbox that is
already gone succeeds. Every ID is tried; the command fails if any failed.`,
		Example: `  hotcell rm sb-3f9a1c2b7d4e
  hotcell rm $(hotcell ls -q --label agent=demo)`,
		Args: requireArgs(1, -1, "at least one sandbox ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			var errs []error
			for _, id := range args {
				if err := c.DeleteSandbox(cmd.Context(), id); err != nil {
					if client.IsUnreachable(err) {
						return err
					}
					fmt.Fprintf(a.stderr, "hotcell: %s\n", a.describe(err))
					errs = append(errs, err)
					continue
				}
				fmt.Fprintln(a.stdout, id)
			}
			if len(errs) > 0 {
				return fmt.Errorf("remove sandboxes: %d of %d failed", len(errs), len(args))
			}
			return nil
		},
	}
}

func (a *app) startCmd() *cobra.Command {
	return a.lifecycleCmd("start", "Start a stopped sandbox",
		`Start a stopped sandbox: the same box comes back, with its root file system and /workspace.`,
		(*client.Client).StartSandbox)
}

func (a *app) stopCmd() *cobra.Command {
	return a.lifecycleCmd("stop", "Stop a sandbox, keeping its files",
		`Stop a sandbox's processes. Its root file system and /workspace are kept; 'hotcell start' brings it back.`,
		(*client.Client).StopSandbox)
}

func (a *app) lifecycleCmd(name, short, long string, call func(*client.Client, context.Context, string) (client.Sandbox, error)) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     name + " ID",
		Short:   short,
		Long:    long,
		Example: "  hotcell " + name + " sb-3f9a1c2b7d4e",
		Args:    requireArgs(1, 1, "one sandbox ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			sb, err := call(c, cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(sb)
			}
			fmt.Fprintln(a.stdout, sb.ID)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the sandbox as JSON")
	return cmd
}
