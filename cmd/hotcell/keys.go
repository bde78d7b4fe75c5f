package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/termsafe"
)

func (a *app) keysCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "keys",
		Short: "Named API keys: create, list, revoke",
		Long: `API keys let a program use the daemon without its token. A key is
e2b_ and 40 hex digits, the format E2B's SDKs expect: use it as E2B_API_KEY
for the E2B-compatible API, or as a bearer token (HOTCELL_TOKEN, --token,
Authorization: Bearer) on hotcell's own API.

The daemon stores only a hash of each key: a key is printed once, when it is
created. Managing keys needs the daemon's token, so a leaked key cannot mint
more keys or revoke others; revoke it with 'hotcell keys rm NAME'.`,
	}
	create := &cobra.Command{
		Use:   "create NAME",
		Short: "Mint a named key and print it (it is not shown again)",
		Long: `Mint a key named NAME (letters, digits, '.', '_', '-'; up to 64) and print
it on stdout. The daemon keeps only its hash: store the key now.`,
		Example: `  hotcell keys create ci
  export E2B_API_KEY=$(hotcell keys create agent-1)
  HOTCELL_TOKEN=$(hotcell keys create scripts) hotcell ls`,
		Args: requireArgs(1, 1, "a key name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			k, err := c.CreateAPIKey(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintln(a.stdout, k.Key)
			fmt.Fprintf(a.stderr, "created key %s: it is not shown again, store it now\n", termsafe.String(k.Name))
			return nil
		},
	}
	var asJSON bool
	ls := &cobra.Command{
		Use:     "ls",
		Aliases: []string{"list"},
		Short:   "List keys: name, hint, created, last used (never the keys)",
		Long: `List the keys by name with a hint (their first characters, to recognise a
key), when each was created and last used (recorded at most once a minute).`,
		Example: `  hotcell keys ls
  hotcell keys ls --json`,
		Args: requireArgs(0, 0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			ks, err := c.APIKeys(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(ks)
			}
			printKeys(a, ks, time.Now())
			return nil
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "print the keys as JSON")
	rm := &cobra.Command{
		Use:     "rm NAME...",
		Aliases: []string{"revoke"},
		Short:   "Revoke keys: they are refused from the next request on",
		Example: `  hotcell keys rm ci
  hotcell keys rm agent-1 agent-2`,
		Args: requireArgs(1, -1, "at least one key name"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			var failed int
			for _, name := range args {
				if err := c.DeleteAPIKey(cmd.Context(), name); err != nil {
					if client.IsUnreachable(err) || len(args) == 1 {
						return err
					}
					fmt.Fprintf(a.stderr, "hotcell: %s\n", termsafe.Text(a.describe(err)))
					failed++
					continue
				}
				fmt.Fprintln(a.stdout, termsafe.String(name))
			}
			if failed > 0 {
				return fmt.Errorf("revoke keys: %d of %d failed", failed, len(args))
			}
			return nil
		},
	}
	cmd.AddCommand(create, ls, rm)
	return cmd
}

func printKeys(a *app, ks []client.APIKey, now time.Time) {
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tHINT\tCREATED\tLAST USED")
	for _, k := range ks {
		used := "never"
		if k.LastUsedAt != nil {
			used = ago(now, *k.LastUsedAt)
		}
		fmt.Fprintf(tw, "%s\t%s…\t%s\t%s\n", termsafe.String(k.Name), termsafe.String(k.Hint), ago(now, k.CreatedAt), used)
	}
	tw.Flush()
}
