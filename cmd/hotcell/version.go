package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hotcell/hotcell/internal/buildinfo"
	"github.com/hotcell/hotcell/internal/termsafe"
)

func (a *app) versionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of hotcell and of the daemon",
		Long: `Print this binary's version and, if the daemon answers, the daemon's version,
driver and engine. An unreachable daemon is reported but is not an error.`,
		Example: "  hotcell version\n  hotcell version --json",
		Args:    requireArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			type serverInfo struct {
				Version       string `json:"version"`
				Driver        string `json:"driver"`
				EngineVersion string `json:"engineVersion"`
				URL           string `json:"url"`
				// Runtimes the engine can run sandboxes under now, and the
				// default of a create that names none.
				Runtimes       []string `json:"runtimes"`
				DefaultRuntime string   `json:"defaultRuntime"`
			}
			out := struct {
				Client      string      `json:"client"`
				Server      *serverInfo `json:"server,omitempty"`
				ServerError string      `json:"serverError,omitempty"`
			}{Client: buildinfo.Version()}

			c, err := a.client()
			if err == nil {
				// The version is worth printing at once even when the daemon
				// hangs; do not wait for it long.
				ctx, cancel := context.WithTimeout(cmd.Context(), 5*time.Second)
				defer cancel()
				h, herr := c.Host(ctx)
				if herr == nil {
					out.Server = &serverInfo{Version: h.Version, Driver: h.Driver, EngineVersion: h.EngineVersion, URL: c.URL(),
						Runtimes: h.Runtimes, DefaultRuntime: h.DefaultRuntime}
				}
				err = herr
			}
			if err != nil {
				out.ServerError = a.describe(err)
			}
			if asJSON {
				return a.printJSON(out)
			}
			fmt.Fprintf(a.stdout, "client: %s\n", out.Client)
			if out.Server != nil {
				fmt.Fprintf(a.stdout, "server: %s at %s (driver %s, engine %s)\n", out.Server.Version, out.Server.URL, out.Server.Driver, out.Server.EngineVersion)
				fmt.Fprintf(a.stdout, "runtimes: %s (default %s)\n", termsafe.String(strings.Join(out.Server.Runtimes, ", ")), termsafe.String(out.Server.DefaultRuntime))
			} else {
				fmt.Fprintf(a.stderr, "server: %s\n", out.ServerError)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	return cmd
}
