package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	dockerclient "github.com/moby/moby/client"
	"github.com/spf13/cobra"

	"github.com/hotcell/hotcell/internal/config"
	"github.com/hotcell/hotcell/internal/images"
)

func (a *app) imageCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "image",
		Short: "Build the images sandboxes run",
		Long:  `Build the images hotcell needs, on this host, without a registry.`,
		Example: `  sudo hotcell image build
  sudo hotcell image build --busybox`,
		SuggestionsMinimumDistance: 2,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return unknownSubcommand(cmd, args[0])
			}
			return cmd.Help()
		},
	}
	cmd.AddCommand(a.imageBuildCmd())
	return cmd
}

func (a *app) imageBuildCmd() *cobra.Command {
	var (
		busybox, noShell, code, ifStale, hotcell, agent bool
		tag, dockerHost, binary                         string
	)
	cmd := &cobra.Command{
		Use:   "build [flags]",
		Short: "Build hotcell/base, hotcell/code or a test image into the local Docker Engine",
		Long: `Build an image into the local Docker Engine.

By default it builds ` + images.BaseRef + `, the default sandbox image: Debian
with bash, git, curl, python3 and ca-certificates, and a non-root user
"user" (uid and gid 1000, home /home/user) as E2B code expects. It starts from
debian:bookworm-slim if a registry answers, else builds the root file system
with debootstrap (needs root and the debootstrap package). Takes minutes.

--code builds ` + images.CodeRef + `, the code-interpreter image (docs/code.md):
hotcell/base plus Debian's python3-ipykernel, pandas, numpy, matplotlib and
nodejs, and hotcell's code server. It needs hotcell/base and Debian's mirror,
and takes a few minutes; --if-stale skips the build when the image is there
and was built from this hotcell's package list and code server.

--hotcell builds ` + images.HotcellRef + `, the image of hotcell egress-node's
DaemonSet (deploy/kubernetes/egress-node.yaml): this hotcell binary (or
--binary, a static build) at ` + images.HotcellBinary + ` on ` + images.EgressBaseRef + `,
which is hotcell/base with Debian's iptables and ipset. The first build makes
` + images.EgressBaseRef + ` from hotcell/base and Debian's mirror (about 30 s);
later ones only add the binary, in seconds. Give the image to the cluster
without a registry: docker save IMAGE | ctr -n k8s.io images import - on each
node (docs/kubernetes.md, "Egress").

--agent builds ` + images.AgentRef + `, the image whose init container puts the
agent into every pod of the Kubernetes driver (docs/kubernetes.md, "The
pod"): the static hotcell-agent beside this hotcell binary (or --binary)
alone, in a second. Give it to the cluster as the hotcell image.

--busybox builds ` + images.BusyboxRef + ` and --noshell builds ` + images.NoShellRef + `,
small images for tests made from the host's static busybox.`,
		Example: `  sudo hotcell image build
  sudo hotcell image build --tag myorg/agent-base:1
  sudo hotcell image build --code --if-stale
  sudo hotcell image build --hotcell --tag hotcell/hotcell:v1
  sudo hotcell image build --agent
  sudo hotcell image build --busybox`,
		Args: requireArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			ref := images.BaseRef
			switch {
			case busybox:
				ref = images.BusyboxRef
			case noShell:
				ref = images.NoShellRef
			case code:
				ref = images.CodeRef
			case hotcell:
				ref = images.HotcellRef
			case agent:
				ref = images.AgentRef
			}
			if binary != "" && !hotcell && !agent {
				return usageError{errors.New("--binary goes with --hotcell or --agent")}
			}
			if agent && binary == "" {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("build image %s: find this hotcell binary (give --binary): %w", ref, err)
				}
				binary = filepath.Join(filepath.Dir(exe), config.AgentBinaryName)
			}
			if hotcell && binary == "" {
				exe, err := os.Executable()
				if err != nil {
					return fmt.Errorf("build image %s: find this hotcell binary (give --binary): %w", ref, err)
				}
				binary = exe
			}
			if ifStale && !code {
				return usageError{errors.New("--if-stale goes with --code")}
			}
			if tag != "" {
				ref = tag
			}
			opts := []dockerclient.Opt{dockerclient.FromEnv}
			if dockerHost != "" {
				opts = append(opts, dockerclient.WithHost(dockerHost))
			}
			dc, err := dockerclient.New(opts...)
			if err != nil {
				return fmt.Errorf("build image %s: docker client: %w", ref, err)
			}
			defer dc.Close()
			ctx := cmd.Context()
			if _, err := dc.Ping(ctx, dockerclient.PingOptions{}); err != nil {
				return fmt.Errorf("build image %s: reach the Docker Engine (is dockerd running, and may this user use it?): %w", ref, err)
			}
			progress := func(line string) { fmt.Fprintln(a.stderr, line) }
			if ifStale {
				current, err := images.CodeImageCurrent(ctx, dc, ref)
				if err != nil {
					return fmt.Errorf("build image %s: %w", ref, err)
				}
				if current {
					progress(ref + " is current (version " + images.CodeVersion() + "); not rebuilding")
					fmt.Fprintln(a.stdout, ref)
					return nil
				}
			}
			switch {
			case busybox:
				progress("building " + ref)
				err = images.BuildBusybox(ctx, dc, ref)
			case noShell:
				progress("building " + ref)
				err = images.BuildNoShell(ctx, dc, ref)
			case code:
				err = images.BuildCode(ctx, dc, ref, progress)
			case hotcell:
				err = images.BuildHotcell(ctx, dc, ref, binary, progress)
			case agent:
				progress("building " + ref + " from " + binary)
				err = images.BuildAgent(ctx, dc, ref, binary)
			default:
				err = images.BuildBase(ctx, dc, ref, progress)
			}
			if err != nil {
				return fmt.Errorf("build image %s: %w", ref, err)
			}
			fmt.Fprintln(a.stdout, ref)
			return nil
		},
	}
	f := cmd.Flags()
	f.BoolVar(&busybox, "busybox", false, "build the busybox test image instead")
	f.BoolVar(&noShell, "noshell", false, "build the shell-less test image instead")
	f.StringVar(&tag, "tag", "", "image reference to build (default: the image's usual name)")
	f.StringVar(&dockerHost, "docker-host", "", "Docker Engine address (default: DOCKER_HOST or the local socket)")
	f.BoolVar(&code, "code", false, "build the code-interpreter image hotcell/code instead")
	f.BoolVar(&ifStale, "if-stale", false, "with --code: build only if the image is missing or out of date")
	f.BoolVar(&hotcell, "hotcell", false, "build the hotcell image of the egress-node DaemonSet, hotcell/hotcell, instead")
	f.BoolVar(&agent, "agent", false, "build the agent image of the Kubernetes driver's pods, hotcell/agent, instead")
	f.StringVar(&binary, "binary", "", "with --hotcell: the static hotcell binary to put in it (default: this one); with --agent: the static hotcell-agent (default: the one beside this hotcell)")
	cmd.MarkFlagsMutuallyExclusive("busybox", "noshell", "code", "hotcell", "agent")
	return cmd
}

// unknownSubcommand is cobra's unknown-command error, with suggestions, for
// a command that has subcommands and no action of its own (cobra only
// checks the root).
func unknownSubcommand(cmd *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, cmd.CommandPath())
	if s := cmd.SuggestionsFor(name); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return usageError{errors.New(msg)}
}
