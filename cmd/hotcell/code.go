package main

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"image"
	_ "image/jpeg" // DecodeConfig of JPEG results
	_ "image/png"  // DecodeConfig of PNG results
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hotcell/hotcell/client"
)

func (a *app) codeCmd() *cobra.Command {
	var (
		code, file, language, contextID, saveDir string
		env                                      []string
		timeout                                  time.Duration
		asJSON                                   bool
	)
	cmd := &cobra.Command{
		Use:   "code ID [flags]",
		Short: "Run Python, JavaScript or Bash cells in a sandbox's code interpreter",
		Long: `Run code in the code interpreter of a sandbox made from hotcell/code
(docs/code.md). Cells run in a context that keeps its state between calls:
the default context of --language (python unless given), or --context.

With -c CODE or -f FILE it runs that one cell: output is streamed as it is
written, the value of the last expression is printed, images (a matplotlib
figure) are saved to --save-images DIR or summarised, and an error prints
its traceback and exits with status 1. With neither, and a terminal on
stdin, it opens a cell prompt: a line runs when Enter is pressed, unless it
ends with ':', '\', '{', '(' or '[' — then the cell goes on until an empty
line. Ctrl-D quits. Without a terminal, stdin is one cell.`,
		Example: `  hotcell code sb-3f9a1c2b7d4e -c 'import pandas as pd; df = pd.DataFrame({"x": [1, 2, 3]})'
  hotcell code sb-3f9a1c2b7d4e -c 'df.x.sum()'
  hotcell code sb-3f9a1c2b7d4e -f plot.py --save-images ./out
  hotcell code sb-3f9a1c2b7d4e --language javascript -c 'const n = 6; n * 7'
  hotcell code sb-3f9a1c2b7d4e --json -c '1 + 1'
  hotcell code sb-3f9a1c2b7d4e                 # interactive cell prompt`,
		Args: requireArgs(1, 1, "a sandbox ID"),
		RunE: func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if code != "" && file != "" {
				return usageError{errors.New("give -c CODE or -f FILE, not both")}
			}
			envs, err := parseKV("env", env)
			if err != nil {
				return err
			}
			c, err := a.client()
			if err != nil {
				return err
			}
			base := client.CodeExecuteRequest{Language: language, ContextID: contextID, Envs: envs, TimeoutMs: timeout.Milliseconds()}
			if file != "" {
				data, err := os.ReadFile(file)
				if err != nil {
					return fmt.Errorf("read %s: %w", file, err)
				}
				code = string(data)
			}
			r := &cellRunner{a: a, c: c, id: id, saveDir: saveDir}
			if code == "" {
				if _, tty := ttyFd(a.stdin); tty && !asJSON {
					return r.prompt(cmd, base)
				}
				data, err := io.ReadAll(a.stdin)
				if err != nil {
					return fmt.Errorf("read stdin: %w", err)
				}
				code = string(data)
			}
			req := base
			req.Code = code
			if asJSON {
				x, err := c.RunCode(cmd.Context(), id, req)
				if err != nil {
					return err
				}
				if err := a.printJSON(x); err != nil {
					return err
				}
				if x.Error != nil {
					return exitWith(1)
				}
				return nil
			}
			x, err := r.run(cmd, req)
			if err != nil {
				return err
			}
			if x.Error != nil {
				return exitWith(1)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVarP(&code, "code", "c", "", "the cell to run")
	f.StringVarP(&file, "file", "f", "", "run the code in `FILE` as one cell")
	f.StringVarP(&language, "language", "l", "", "python (default), javascript or bash")
	f.StringVar(&contextID, "context", "", "run in the context `ID` (from the API's /code/contexts)")
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable `KEY=VALUE` for this cell (repeatable)")
	f.DurationVar(&timeout, "timeout", 0, "interrupt the cell after this long; the context keeps its state (default: the daemon's exec timeout)")
	f.StringVar(&saveDir, "save-images", "", "save image results (PNG, JPEG, SVG) into `DIR`")
	f.BoolVar(&asJSON, "json", false, "print the whole execution as JSON")
	cmd.MarkFlagsMutuallyExclusive("language", "context")
	return cmd
}

// cellRunner runs cells and prints what they produce.
type cellRunner struct {
	a       *app
	c       *client.Client
	id      string
	saveDir string
	images  int
}

func (r *cellRunner) run(cmd *cobra.Command, req client.CodeExecuteRequest) (client.CodeExecution, error) {
	st, err := r.c.RunCodeStream(cmd.Context(), r.id, req)
	if err != nil {
		return client.CodeExecution{}, err
	}
	defer st.Close()
	for {
		ev, err := st.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return client.CodeExecution{}, err
		}
		switch ev.Type {
		case client.CodeEventStdout:
			fmt.Fprint(r.a.stdout, ev.Text)
		case client.CodeEventStderr:
			fmt.Fprint(r.a.stderr, ev.Text)
		case client.CodeEventResult:
			r.printResult(*ev.Result)
		case client.CodeEventError:
			e := ev.Error
			if e.Traceback != "" {
				fmt.Fprintln(r.a.stderr, strings.TrimRight(e.Traceback, "\n"))
			} else {
				fmt.Fprintf(r.a.stderr, "%s: %s\n", e.Name, e.Value)
			}
		}
	}
	return st.Wait()
}

// printResult prints a result's text, and saves or describes its images.
func (r *cellRunner) printResult(res client.CodeResult) {
	for _, img := range []struct{ ext, data string }{{"png", res.PNG}, {"jpeg", res.JPEG}, {"svg", res.SVG}} {
		if img.data == "" {
			continue
		}
		var raw []byte
		if img.ext == "svg" {
			raw = []byte(img.data)
		} else if b, err := base64.StdEncoding.DecodeString(img.data); err == nil {
			raw = b
		} else {
			fmt.Fprintf(r.a.stderr, "hotcell: a %s result is not base64: %v\n", img.ext, err)
			continue
		}
		size := ""
		if cfg, _, err := image.DecodeConfig(bytes.NewReader(raw)); err == nil {
			size = fmt.Sprintf(" %dx%d", cfg.Width, cfg.Height)
		}
		if r.saveDir == "" {
			fmt.Fprintf(r.a.stdout, "[%s image%s, %d bytes: --save-images DIR saves it]\n", img.ext, size, len(raw))
			continue
		}
		r.images++
		path := filepath.Join(r.saveDir, fmt.Sprintf("result-%d.%s", r.images, img.ext))
		if err := os.MkdirAll(r.saveDir, 0o755); err == nil {
			err = os.WriteFile(path, raw, 0o644)
		}
		fmt.Fprintf(r.a.stdout, "[%s image%s saved to %s]\n", img.ext, size, path)
		return
	}
	if res.PNG != "" || res.JPEG != "" || res.SVG != "" {
		return // the image was the point; its text is "<Figure ...>"
	}
	switch {
	case res.Text != "":
		fmt.Fprintln(r.a.stdout, res.Text)
	case res.Markdown != "":
		fmt.Fprintln(r.a.stdout, res.Markdown)
	case res.HTML != "":
		fmt.Fprintln(r.a.stdout, res.HTML)
	}
}

// prompt reads cells from the terminal and runs each.
func (r *cellRunner) prompt(cmd *cobra.Command, base client.CodeExecuteRequest) error {
	lang := base.Language
	if lang == "" && base.ContextID == "" {
		lang = client.CodeLanguagePython
	}
	fmt.Fprintf(r.a.stderr, "hotcell code: %s in sandbox %s; Ctrl-D quits\n", strings.TrimSpace(lang+" "+base.ContextID), r.id)
	in := bufio.NewReader(r.a.stdin)
	n := 1
	for {
		fmt.Fprintf(r.a.stdout, "In [%d]: ", n)
		var cell []string
		for {
			line, err := in.ReadString('\n')
			if err != nil && line == "" {
				fmt.Fprintln(r.a.stdout)
				return nil
			}
			line = strings.TrimRight(line, "\r\n")
			if len(cell) > 0 && strings.TrimSpace(line) == "" {
				break
			}
			cell = append(cell, line)
			t := strings.TrimSpace(line)
			if len(cell) == 1 && !strings.HasSuffix(t, ":") && !strings.HasSuffix(t, "\\") && !strings.HasSuffix(t, "{") &&
				!strings.HasSuffix(t, "(") && !strings.HasSuffix(t, "[") {
				break
			}
			fmt.Fprint(r.a.stdout, "   ...: ")
		}
		code := strings.Join(cell, "\n")
		if strings.TrimSpace(code) == "" {
			continue
		}
		req := base
		req.Code = code
		x, err := r.run(cmd, req)
		if err != nil {
			fmt.Fprintf(r.a.stderr, "hotcell: %v\n", err)
			continue
		}
		if x.ExecutionCount > 0 {
			n = x.ExecutionCount + 1
		} else {
			n++
		}
	}
}
