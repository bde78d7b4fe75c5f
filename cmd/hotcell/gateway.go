package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func (a *app) usageCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "usage ID",
		Short: "Show a sandbox's LLM gateway usage",
		Long: `Show what a sandbox sent through the LLM gateway, per provider: requests
forwarded, refused by a budget or the rate limit, upstream errors, bytes each way
and the token usage the upstream reported, beside the provider's budgets.`,
		Example: `  hotcell usage sb-3f9a1c2b7d4e`,
		Args:    requireArgs(1, 1, "one sandbox ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			u, err := c.Usage(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(u)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "PROVIDER\tREQUESTS\tREJECTED\tERRORS\tIN TOKENS\tOUT TOKENS\tTOTAL\tBYTES IN/OUT\tBUDGET")
			for _, p := range u.Providers {
				budget := "-"
				if b := p.Budget; b.Requests > 0 || b.Tokens > 0 || b.RatePerMinute > 0 {
					budget = fmt.Sprintf("requests %s, tokens %s, %s/min", limit(b.Requests), limit(b.Tokens), limit(b.RatePerMinute))
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d/%d\t%s\n", p.Provider, p.Requests, p.Rejected, p.Errors,
					p.InputTokens, p.OutputTokens, p.TotalTokens, p.BytesIn, p.BytesOut, budget)
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the usage as JSON")
	return cmd
}

func limit(n int64) string {
	if n == 0 {
		return "unlimited"
	}
	return fmt.Sprint(n)
}

// list joins names for a line of output, "-" for none.
func list(names []string) string {
	if len(names) == 0 {
		return "-"
	}
	return strings.Join(names, ", ")
}

func (a *app) gatewayCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "gateway",
		Short: "LLM gateway: providers, and a sandbox's tokens",
		Long: `The LLM gateway lets sandboxes call LLM providers with a token scoped to
themselves; the real keys stay on the host. Give a sandbox access at create
(hotcell create --gateway openai). See docs/gateway.md.`,
	}
	var asJSON bool
	providers := &cobra.Command{
		Use:   "providers",
		Short: "List the configured providers (never their keys)",
		Example: `  hotcell gateway providers
  hotcell gateway providers --json`,
		Args: requireArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ps, err := c.GatewayProviders(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(ps)
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tKIND\tUPSTREAM\tREQUESTS\tTOKENS\tPER MINUTE")
			for _, p := range ps {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, p.Kind, p.BaseURL, limit(p.Budget.Requests), limit(p.Budget.Tokens), limit(p.Budget.RatePerMinute))
			}
			return tw.Flush()
		},
	}
	providers.Flags().BoolVar(&asJSON, "json", false, "print the providers as JSON")
	rotate := &cobra.Command{
		Use:   "rotate ID PROVIDER",
		Short: "Replace a sandbox's token for a provider",
		Long: `Mint a new token for the sandbox and provider; the old one (the one in the
sandbox's env) stops working at once. The new token is printed and, when the
sandbox runs, written to /.hotcell-state/gateway/PROVIDER.token inside it.`,
		Example: `  hotcell gateway rotate sb-3f9a1c2b7d4e openai`,
		Args:    requireArgs(2, 2, "a sandbox ID and a provider"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			cred, err := c.RotateGatewayToken(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, cred.Token)
			if cred.TokenFile != "" {
				fmt.Fprintf(a.stderr, "written to %s in the sandbox\n", cred.TokenFile)
			}
			return nil
		},
	}
	revoke := &cobra.Command{
		Use:     "revoke ID PROVIDER",
		Short:   "Remove a provider from a sandbox; its token stops working",
		Example: `  hotcell gateway revoke sb-3f9a1c2b7d4e openai`,
		Args:    requireArgs(2, 2, "a sandbox ID and a provider"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			_, err = c.RevokeGateway(cmd.Context(), args[0], args[1])
			return err
		},
	}
	reload := &cobra.Command{
		Use:   "reload",
		Short: "Re-read the providers' keys without a restart (as SIGHUP does)",
		Long: `Make the daemon read its providers' keys again from their key_file (or
key_env) as the config now names them, e.g. after rotating a key upstream.
The next request upstream carries the new key; sandboxes and their tokens
are untouched. Other changes to [[provider]] tables need a restart; they are
listed. Sending the daemon SIGHUP does the same.`,
		Example: `  hotcell gateway reload`,
		Args:    requireArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			res, err := c.ReloadGateway(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "new key: %s\nsame key: %s\n", list(res.Changed), list(res.Unchanged))
			for _, n := range res.NeedsRestart {
				fmt.Fprintf(a.stderr, "needs a restart: %s\n", n)
			}
			return nil
		},
	}
	cmd.AddCommand(providers, rotate, revoke, reload)
	return cmd
}
