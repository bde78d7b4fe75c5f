package mcpserver

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hotcell/hotcell/client"
)

// maxCodeImages bounds the images one run_code result carries.
const maxCodeImages = 8

// resultTextCap bounds each text form of a result in run_code's answer.
const resultTextCap = 8 << 10

const codeOutputHint = `print less, or write the data to a file and page through it with file_read`

type runCodeIn struct {
	SandboxID string            `json:"sandboxId" jsonschema:"the sandbox to run the code in; it must be made from the image hotcell/code:latest"`
	Code      string            `json:"code" jsonschema:"the cell to run"`
	Language  string            `json:"language,omitempty" jsonschema:"python (the default), javascript or bash; runs in that language's default context, whose variables persist between calls"`
	ContextID string            `json:"contextId,omitempty" jsonschema:"run in this context instead of the language's default one"`
	Envs      map[string]string `json:"envs,omitempty" jsonschema:"environment variables for this cell only"`
	TimeoutMs int64             `json:"timeoutMs,omitempty" jsonschema:"interrupt the cell after this many milliseconds (its variables are kept); absent means the daemon's default (60000)"`
}

type runCodeResult struct {
	IsMainResult bool     `json:"isMainResult" jsonschema:"the value of the cell's last expression (else a display() call)"`
	Formats      []string `json:"formats" jsonschema:"the formats the value was rendered in; png and jpeg come as image content"`
	Text         string   `json:"text,omitempty"`
	HTML         string   `json:"html,omitempty" jsonschema:"HTML form (a pandas DataFrame's table), shortened past 8 KiB"`
	Markdown     string   `json:"markdown,omitempty"`
	JSON         string   `json:"json,omitempty"`
}

type runCodeOut struct {
	Results        []runCodeResult   `json:"results"`
	Stdout         string            `json:"stdout"`
	Stderr         string            `json:"stderr"`
	Error          *client.CodeError `json:"error,omitempty" jsonschema:"the exception the cell raised (name, value, traceback); TimeoutError when interrupted, KernelDied when the interpreter exited (the next call starts a new one)"`
	ExecutionCount int               `json:"executionCount"`
	Images         int               `json:"images" jsonschema:"how many images are attached as image content"`
	Note           string            `json:"note,omitempty"`
}

func (t *tools) registerCode(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{
		Name:  "run_code",
		Title: "Run a code cell",
		Description: `Run a cell of Python, JavaScript or Bash in a sandbox made from hotcell/code:latest, like a Jupyter notebook: variables, imports and functions persist between calls in the same context.
Returns stdout, stderr, the value of the last expression and every display() with their text/HTML/markdown/JSON forms, and the error with its traceback. Charts (matplotlib figures, shown without savefig) and other PNG or JPEG results are attached as images.
pandas, numpy and matplotlib are installed. An exception is a normal result, not a tool error.`,
		InputSchema: inputSchema[runCodeIn](map[string]prop{
			"sandboxId": nonEmpty,
			"timeoutMs": between(0, 24*60*60*1000),
		}),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(true)},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in runCodeIn) (*mcp.CallToolResult, runCodeOut, error) {
		res, out, err := t.runCode(ctx, in)
		if err != nil {
			return nil, runCodeOut{}, t.explain(err)
		}
		return res, out, nil
	})
}

var ansiEscape = regexp.MustCompile("\x1b\\[[0-9;]*[A-Za-z]")

func (t *tools) runCode(ctx context.Context, in runCodeIn) (*mcp.CallToolResult, runCodeOut, error) {
	st, err := t.c.RunCodeStream(ctx, in.SandboxID, client.CodeExecuteRequest{
		Code: in.Code, Language: in.Language, ContextID: in.ContextID, Envs: in.Envs, TimeoutMs: in.TimeoutMs,
	})
	if err != nil {
		return nil, runCodeOut{}, err
	}
	defer st.Close()
	stdout, stderr := newHeadTail(outputHead, outputTail), newHeadTail(outputHead, outputTail)
	out := runCodeOut{Results: []runCodeResult{}}
	res := &mcp.CallToolResult{}
	var notes []string
	for {
		ev, err := st.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, runCodeOut{}, err
		}
		switch ev.Type {
		case client.CodeEventStdout:
			_, _ = stdout.Write([]byte(ev.Text))
		case client.CodeEventStderr:
			_, _ = stderr.Write([]byte(ev.Text))
		case client.CodeEventError:
			e := *ev.Error
			// Agents read tracebacks as text: IPython's colours are noise.
			e.Traceback = clipText(ansiEscape.ReplaceAllString(e.Traceback, ""), resultTextCap)
			out.Error = &e
		case client.CodeEventExecutionCount:
			out.ExecutionCount = ev.ExecutionCount
		case client.CodeEventResult:
			r := ev.Result
			rr := runCodeResult{IsMainResult: r.IsMainResult, Formats: r.Formats(),
				Text: clipText(r.Text, resultTextCap), HTML: clipText(r.HTML, resultTextCap),
				Markdown: clipText(r.Markdown, resultTextCap), JSON: clipText(string(r.JSON), resultTextCap)}
			for _, img := range []struct{ mime, data string }{{"image/png", r.PNG}, {"image/jpeg", r.JPEG}} {
				if img.data == "" {
					continue
				}
				raw, err := base64.StdEncoding.DecodeString(img.data)
				if err != nil {
					notes = append(notes, "an image result was not valid base64 and was left out")
					continue
				}
				if out.Images == maxCodeImages {
					notes = append(notes, fmt.Sprintf("only the first %d images are attached", maxCodeImages))
					continue
				}
				out.Images++
				res.Content = append(res.Content, &mcp.ImageContent{MIMEType: img.mime, Data: raw})
			}
			out.Results = append(out.Results, rr)
		}
	}
	out.Stdout, out.Stderr = stdout.String(codeOutputHint), stderr.String(codeOutputHint)
	if stdout.Cut() || stderr.Cut() {
		notes = append(notes, "output was shortened: "+codeOutputHint)
	}
	out.Note = strings.Join(notes, "; ")
	res.Content = append([]mcp.Content{&mcp.TextContent{Text: codeSummary(out)}}, res.Content...)
	return res, out, nil
}

// codeSummary is the text an agent reads first: output, value, error.
func codeSummary(out runCodeOut) string {
	var b strings.Builder
	if out.Stdout != "" {
		fmt.Fprintf(&b, "stdout:\n%s\n", strings.TrimRight(out.Stdout, "\n"))
	}
	if out.Stderr != "" {
		fmt.Fprintf(&b, "stderr:\n%s\n", strings.TrimRight(out.Stderr, "\n"))
	}
	for _, r := range out.Results {
		label := "display"
		if r.IsMainResult {
			label = "result"
		}
		switch {
		case r.Text != "":
			fmt.Fprintf(&b, "%s (%s):\n%s\n", label, strings.Join(r.Formats, ", "), r.Text)
		default:
			fmt.Fprintf(&b, "%s (%s)\n", label, strings.Join(r.Formats, ", "))
		}
	}
	if out.Error != nil {
		fmt.Fprintf(&b, "error: %s: %s\n%s\n", out.Error.Name, out.Error.Value, out.Error.Traceback)
	}
	if out.Images > 0 {
		fmt.Fprintf(&b, "%d image(s) attached\n", out.Images)
	}
	if out.Note != "" {
		fmt.Fprintf(&b, "note: %s\n", out.Note)
	}
	if b.Len() == 0 {
		return "(no output)"
	}
	return b.String()
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + fmt.Sprintf("… [%d more bytes]", len(s)-n)
}
