package main

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/termsafe"
)

// isTTY reports whether w is a terminal, where progress bars make sense.
func isTTY(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progress returns a reporter of bytes read: a spinner-style bar on a
// terminal, a plain line every few seconds otherwise.
func (a *app) progress(what string) (report func(int64), done func()) {
	if isTTY(a.stderr) {
		bar := progressbar.NewOptions64(-1,
			progressbar.OptionSetWriter(a.stderr),
			progressbar.OptionSetDescription(what),
			progressbar.OptionShowBytes(true),
			progressbar.OptionThrottle(100*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
		return func(n int64) { _ = bar.Set64(n) }, func() { _ = bar.Finish() }
	}
	var last time.Time
	return func(n int64) {
		if time.Since(last) >= 2*time.Second {
			last = time.Now()
			fmt.Fprintf(a.stderr, "%s: %d MiB\n", what, n>>20)
		}
	}, func() {}
}

func (a *app) backupCmd() *cobra.Command {
	var (
		gz     bool
		keep   int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "backup ID",
		Short: "Back up a sandbox's workspace",
		Long: `Stream /workspace of a running sandbox into a backup kept by the daemon, with
its size and sha256. Only the newest backups are kept (--keep, default the
daemon's 10). Restore it with 'hotcell restore'.`,
		Example: `  hotcell backup sb-3f9a1c2b7d4e
  hotcell backup sb-3f9a1c2b7d4e --gzip --keep 3`,
		Args: requireArgs(1, 1, "one sandbox ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			report, done := a.progress("backing up " + args[0])
			b, err := c.CreateBackup(cmd.Context(), args[0], client.BackupOptions{Gzip: gz, Keep: keep, Progress: report})
			done()
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(b)
			}
			fmt.Fprintf(a.stdout, "%s\t%d bytes\tsha256 %s\n", b.ID, b.Size, b.SHA256)
			return nil
		},
	}
	cmd.Flags().BoolVar(&gz, "gzip", false, "compress the backup")
	cmd.Flags().IntVar(&keep, "keep", 0, "keep only this many newest backups of the sandbox")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the backup as JSON")
	return cmd
}

func (a *app) backupsCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "backups ID",
		Short:   "List a sandbox's backups, newest first",
		Example: `  hotcell backups sb-3f9a1c2b7d4e`,
		Args:    requireArgs(1, 1, "one sandbox ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			list, err := c.Backups(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(client.BackupList{Backups: list})
			}
			tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tCREATED\tSIZE\tGZIP\tSOURCE\tSHA256")
			for _, b := range list {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%v\t%s\t%s\n", b.ID, b.CreatedAt.Local().Format(time.DateTime), b.Size, b.Gzip, termsafe.String(b.Source), b.SHA256[:min(12, len(b.SHA256))])
			}
			return tw.Flush()
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func (a *app) restoreCmd() *cobra.Command {
	var (
		from   string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "restore ID BACKUP",
		Short: "Replace a sandbox's workspace with a backup",
		Long: `Replace /workspace of a running sandbox with a backup: files made after the
backup are gone. The backup is verified before the old workspace is touched;
a failure leaves it as it was. --from restores a backup of another sandbox.`,
		Example: `  hotcell restore sb-3f9a1c2b7d4e bk-0c1d2e3f4a5b
  hotcell restore sb-new000000001 bk-0c1d2e3f4a5b --from sb-3f9a1c2b7d4e`,
		Args: requireArgs(2, 2, "a sandbox ID and a backup ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			if !asJSON {
				fmt.Fprintf(a.stderr, "restoring %s into %s...\n", args[1], args[0])
			}
			res, err := c.Restore(cmd.Context(), args[0], client.RestoreRequest{BackupID: args[1], SourceSandboxID: from})
			if err != nil {
				return err
			}
			if asJSON {
				return a.printJSON(res)
			}
			fmt.Fprintf(a.stdout, "restored %s: %d entries, %d bytes\n", res.BackupID, res.Files, res.Bytes)
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the sandbox the backup belongs to (default: ID)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func (a *app) snapshotCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "snapshot ID",
		Short: "Snapshot a sandbox's root filesystem and workspace",
		Long: `Save a running sandbox's root filesystem (installed packages and all) and its
workspace; create copies from it with {"snapshot": "sn-..."} in the create
request (POST /v1/sandboxes).`,
		Example: `  hotcell snapshot sb-3f9a1c2b7d4e`,
		Args:    requireArgs(1, 1, "one sandbox ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			sn, err := c.CreateSnapshot(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stdout, "%s\t%s\n", sn.ID, termsafe.String(sn.Image))
			return nil
		},
	}
	return cmd
}
