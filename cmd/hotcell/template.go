package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/termsafe"
)

func (a *app) templateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "template",
		Aliases: []string{"templates"},
		Short:   "Templates: build, list, remove the images sandboxes are made from",
		Long: `A template is a named image, built from a Dockerfile on the daemon's Docker
Engine (no registry: FROM hotcell/base or any local image), with defaults for
the sandboxes made from it (hotcell create --template NAME). Each build is a
new version with its own image, so running sandboxes keep theirs.`,
		Example: `  hotcell template build -t py-data .
  hotcell template save $id -t my-box       # this sandbox, its /workspace included
  hotcell template ls
  hotcell template pool py-data --min 8     # keep 8 ready: creates take one in ms
  hotcell create --template py-data
  hotcell template rm py-data`,
		SuggestionsMinimumDistance: 2,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownSubcommand(cmd, args[0])
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(a.templateBuildCmd(), a.templateSaveCmd(), a.templateLsCmd(), a.templateRmCmd(), a.templatePoolCmd())
	return cmd
}

func (a *app) templateBuildCmd() *cobra.Command {
	var (
		name, dockerfile, runtime string
		workspace, image          string
		env                       []string
		memory                    int64
		cpus                      float64
		quiet                     bool
	)
	cmd := &cobra.Command{
		Use:   "build -t NAME [-f Dockerfile] [CONTEXT_DIR] | build -t NAME --image REF",
		Short: "Build a new version of a template from a Dockerfile, streaming the build",
		Long: `Send CONTEXT_DIR (default .) as the build context and build the next version
of template NAME on the daemon's engine, printing the build output to stderr
as it comes (on a terminal, under it a status line with the step, e.g.
[3/7 12s] RUN make, and its time). A failed build prints its log and the
error, and records nothing.
--env, --runtime, --memory and --cpus are defaults of the sandboxes made from
the template; a create's own values win. --workspace DIR makes directory DIR
of the built image the workspace seed: every sandbox made from the template
starts with its contents in /workspace.
On Kubernetes the daemon builds the Dockerfile itself, each stage in a
sandbox of its base (docs/kubernetes.md, Template builds); it needs the
daemon's kubernetes_registry.
--image REF registers the existing image REF as the next version instead,
with no build (the daemon pulls it on Docker; on Kubernetes the kubelet
does). Deleting the template leaves the image.`,
		Example: `  hotcell template build -t py-data .
  hotcell template build -t py-data -f docker/Dockerfile.py --env PYTHONUNBUFFERED=1 ./src
  hotcell template build -t course --workspace /opt/course .   # Dockerfile: COPY lessons /opt/course
  hotcell template build -t py --image python:3.12-slim --env PYTHONUNBUFFERED=1
  hotcell create --template py-data`,
		Args: requireArgs(0, 1, "at most one context directory"),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := "."
			if len(args) == 1 {
				dir = args[0]
			}
			if image != "" && (len(args) == 1 || dockerfile != "") {
				return usageError{fmt.Errorf("--image %s: a template from an image has no build: give no context directory and no -f", image)}
			}
			rel := dockerfile
			if filepath.IsAbs(dockerfile) {
				absDir, err := filepath.Abs(dir)
				if err != nil {
					return err
				}
				absFile, err := filepath.Abs(dockerfile)
				if err != nil {
					return err
				}
				if rel, err = filepath.Rel(absDir, absFile); err != nil || strings.HasPrefix(rel, "..") {
					return usageError{fmt.Errorf("-f %s: the Dockerfile must be inside the context directory %s", dockerfile, dir)}
				}
			}
			envMap, err := parseKV("env", env)
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			var defaults *client.TemplateDefaults
			if len(envMap) > 0 || runtime != "" || memory != 0 || cpus != 0 {
				defaults = &client.TemplateDefaults{Env: envMap, Runtime: runtime, Limits: client.Limits{MemoryMB: memory, CPUs: cpus}}
			}
			if image != "" {
				t, err := c.TemplateFromImage(cmd.Context(), name, image, client.TemplateFromImageOptions{Defaults: defaults, Workspace: workspace})
				if err != nil {
					return err
				}
				fmt.Fprintf(a.stdout, "%s:%d\n", termsafe.String(t.Name), t.Version)
				return nil
			}
			pr, pw := io.Pipe()
			go func() { pw.CloseWithError(writeTar(pw, dir, a.stderr)) }()
			defer pr.Close()
			show := func(line string) {
				if !quiet {
					fmt.Fprintln(a.stderr, termsafe.String(line))
				}
			}
			finish := func(string) {}
			if !quiet && isTTY(a.stderr) {
				show, finish = a.buildProgress()
			}
			t, err := c.BuildTemplate(cmd.Context(), name, client.BuildTemplateOptions{Dockerfile: filepath.ToSlash(rel), Defaults: defaults, Workspace: workspace}, pr, show)
			if err != nil {
				finish("build failed")
				return err
			}
			finish(fmt.Sprintf("built %s:%d", termsafe.String(t.Name), t.Version))
			fmt.Fprintf(a.stdout, "%s:%d\n", termsafe.String(t.Name), t.Version)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&name, "tag", "t", "", "template `NAME` (required)")
	f.StringVarP(&dockerfile, "file", "f", "", "path of the Dockerfile inside the context, or an absolute path to one in it (default CONTEXT_DIR/Dockerfile)")
	f.StringArrayVar(&env, "env", nil, "default environment variable `KEY=VALUE` of sandboxes made from it (repeatable)")
	f.StringVar(&runtime, "runtime", "", "default isolation `RUNTIME` (runc or gvisor)")
	f.Int64Var(&memory, "memory", 0, "default memory limit in `MiB`")
	f.Float64Var(&cpus, "cpus", 0, "default CPU limit")
	f.StringVar(&workspace, "workspace", "", "absolute `DIR` of the built image whose contents every sandbox made from it starts with in /workspace")
	f.StringVar(&image, "image", "", "register the existing image `REF` as the next version, with no build")
	f.BoolVarP(&quiet, "quiet", "q", false, "do not print the build output")
	_ = cmd.MarkFlagRequired("tag")
	return cmd
}

// buildProgress shows a build on the terminal a.stderr is: its output,
// and a status line with the step and its time, redrawn every second.
func (a *app) buildProgress() (show func(string), finish func(result string)) {
	width := 80
	if f, ok := a.stderr.(*os.File); ok {
		if w, _, err := term.GetSize(int(f.Fd())); err == nil {
			width = w
		}
	}
	var mu sync.Mutex
	d := newBuildDisplay(a.stderr, width)
	stop := make(chan struct{})
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				mu.Lock()
				d.status()
				mu.Unlock()
			}
		}
	}()
	var once sync.Once
	return func(line string) {
			mu.Lock()
			d.line(line)
			mu.Unlock()
		}, func(result string) {
			once.Do(func() {
				close(stop)
				<-ended
				d.done(result)
			})
		}
}

func (a *app) templateSaveCmd() *cobra.Command {
	var (
		name, runtime string
		env           []string
		memory        int64
		cpus          float64
	)
	cmd := &cobra.Command{
		Use:   "save SANDBOX -t NAME",
		Short: "Save a running sandbox as the next version of a template",
		Long: `Save running sandbox SANDBOX as the next version of template NAME: its root
filesystem becomes the image (the box is paused for the commit, its
processes go on after), its /workspace the workspace every sandbox made
from the template starts with, and its env, limits, runtime and egress
policy the defaults. --env, --runtime, --memory and --cpus override those
defaults. A failed save records nothing; earlier versions stay as they were.`,
		Example: `  hotcell template save $id -t my-box
  hotcell template save $id -t my-box --env MODE=replay --memory 1024
  hotcell create --template my-box`,
		Args: requireArgs(1, 1, "a sandbox id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			envMap, err := parseKV("env", env)
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			var over *client.TemplateDefaults
			if len(envMap) > 0 || runtime != "" || memory != 0 || cpus != 0 {
				over = &client.TemplateDefaults{Env: envMap, Runtime: runtime, Limits: client.Limits{MemoryMB: memory, CPUs: cpus}}
			}
			t, err := c.SaveTemplate(cmd.Context(), args[0], name, over)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "%s:%d\n", termsafe.String(t.Name), t.Version)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&name, "tag", "t", "", "template `NAME` (required)")
	f.StringArrayVar(&env, "env", nil, "default environment variable `KEY=VALUE`, over the sandbox's (repeatable)")
	f.StringVar(&runtime, "runtime", "", "default isolation `RUNTIME` (runc or gvisor) instead of the sandbox's")
	f.Int64Var(&memory, "memory", 0, "default memory limit in `MiB` instead of the sandbox's")
	f.Float64Var(&cpus, "cpus", 0, "default CPU limit instead of the sandbox's")
	_ = cmd.MarkFlagRequired("tag")
	return cmd
}

func (a *app) templateLsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List templates (their latest versions)",
		Example: `  hotcell template ls
  hotcell template ls --json`,
		Args: requireArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ts, err := c.ListTemplates(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(ts)
			}
			now := time.Now()
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tVERSION\tIMAGE\tCREATED\tPOOL\tCLAIMS\tMISSES")
			for _, t := range ts {
				pool, claims, misses := "-", "-", "-"
				if p := t.Pool; p != nil {
					pool = poolSize(*p)
					claims, misses = fmt.Sprint(p.Claims), fmt.Sprint(p.Misses)
				}
				fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\n", termsafe.String(t.Name), t.Version, termsafe.String(t.Image), ago(now, t.CreatedAt), pool, claims, misses)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the templates as JSON")
	return cmd
}

func (a *app) templateRmCmd() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:     "rm NAME",
		Aliases: []string{"remove"},
		Short:   "Remove a template, every version and its images",
		Long: `Remove a template. While a sandbox made from it exists this is refused,
unless --force (the images those sandboxes run then stay on the engine).`,
		Example: `  hotcell template rm py-data
  hotcell template rm --force py-data`,
		Args: requireArgs(1, 1, "a template name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if err := c.DeleteTemplate(cmd.Context(), args[0], force); err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, termsafe.String(args[0]))
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "remove it even while sandboxes use it")
	return cmd
}

// poolSize reads "ready/min", with the boxes being made: "3/8 (+2)".
func poolSize(p client.PoolStatus) string {
	s := fmt.Sprintf("%d/%d", p.Ready, p.Config.Min)
	if p.Creating > 0 {
		s += fmt.Sprintf(" (+%d)", p.Creating)
	}
	return s
}

func (a *app) templatePoolCmd() *cobra.Command {
	var (
		minN, maxN int
		refill     float64
		asJSON     bool
	)
	cmd := &cobra.Command{
		Use:   "pool NAME [--min N] [--max M] [--refill R]",
		Short: "Show or set a template's warm pool of ready sandboxes",
		Long: `A warm pool keeps --min sandboxes of the template's latest version made and
running, hidden, so that a create from the template (hotcell create
--template NAME, the API, the SDK, MCP) claims one in milliseconds and gives
it its own env, labels, egress policy, gateway tokens and timeouts. Under
demand the pool grows towards --max; --refill bounds how many boxes it
starts per second. --min 0 removes the pool. Without flags, shows the pool.
The pool is kept by the daemon and comes back with it.`,
		Example: `  hotcell template pool py-data --min 8
  hotcell template pool py-data --min 8 --max 32 --refill 4
  hotcell template pool py-data            # ready, creating, claims, misses
  hotcell template pool py-data --min 0    # remove the pool`,
		Args: requireArgs(1, 1, "a template name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			name := args[0]
			set := cmd.Flags().Changed("min") || cmd.Flags().Changed("max") || cmd.Flags().Changed("refill")
			var st client.PoolStatus
			switch {
			case set && !cmd.Flags().Changed("min"):
				return fmt.Errorf("give --min with --max or --refill (--min 0 removes the pool)")
			case set && minN == 0:
				if err := c.DeleteTemplatePool(cmd.Context(), name); err != nil {
					return err
				}
				fmt.Fprintf(a.stderr, "pool of %s removed; its boxes are being destroyed\n", termsafe.String(name))
				return nil
			case set:
				st, err = c.SetTemplatePool(cmd.Context(), name, client.PoolConfig{Min: minN, Max: maxN, RefillPerSecond: refill})
			default:
				st, err = c.GetTemplatePool(cmd.Context(), name)
			}
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(st)
			}
			max := st.Config.Max
			if max < st.Config.Min {
				max = st.Config.Min
			}
			rate := st.Config.RefillPerSecond
			if rate == 0 {
				rate = 2
			}
			fmt.Fprintf(a.stdout, "template %s version %d: %d ready, %d being made (min %d, max %d, refill %g/s); %d claims, %d misses\n",
				termsafe.String(st.Template), st.Version, st.Ready, st.Creating, st.Config.Min, max, rate, st.Claims, st.Misses)
			if st.LastError != "" {
				fmt.Fprintf(a.stdout, "last refill error: %s\n", termsafe.String(st.LastError))
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&minN, "min", 0, "ready sandboxes to keep (0 removes the pool)")
	cmd.Flags().IntVar(&maxN, "max", 0, "most sandboxes the pool grows to under demand (default: min)")
	cmd.Flags().Float64Var(&refill, "refill", 0, "most sandboxes the pool starts per second (default 2)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the pool as JSON")
	return cmd
}
