package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// file_read returns readDefault bytes unless asked for more, and never more
// than readMax: a larger file is paged through with offset.
const (
	readDefault = 32 << 10
	readMax     = 256 << 10
	// maxListEntries bounds file_list's answer.
	maxListEntries = 1000
)

type fileReadIn struct {
	SandboxID string `json:"sandboxId" jsonschema:"the sandbox to read from"`
	Path      string `json:"path" jsonschema:"the file, absolute or relative to /workspace"`
	Offset    int64  `json:"offset,omitempty" jsonschema:"byte offset to start reading at; 0 or absent means the start. To read on, pass the nextOffset of the previous result"`
	Length    int64  `json:"length,omitempty" jsonschema:"how many bytes to read at most; absent means 32768, more than 262144 reads 262144"`
}

type fileReadOut struct {
	Path       string `json:"path"`
	Size       *int64 `json:"size,omitempty" jsonschema:"the file's size in bytes"`
	Offset     int64  `json:"offset" jsonschema:"where content starts in the file"`
	Length     int64  `json:"length" jsonschema:"how many bytes of the file content holds"`
	Encoding   string `json:"encoding" jsonschema:"text: content is the bytes as UTF-8 text; base64: the bytes are not UTF-8 text, content is their base64"`
	Content    string `json:"content"`
	EOF        bool   `json:"eof" jsonschema:"content reaches the end of the file"`
	NextOffset *int64 `json:"nextOffset,omitempty" jsonschema:"where the rest starts: pass it as offset to read on; absent at the end of the file"`
	Note       string `json:"note,omitempty"`
}

type fileWriteIn struct {
	SandboxID string `json:"sandboxId" jsonschema:"the sandbox to write to"`
	Path      string `json:"path" jsonschema:"the file, absolute or relative to /workspace; missing parent directories are created"`
	Content   string `json:"content" jsonschema:"the whole new content of the file (it replaces the file atomically); text, or base64 if encoding is base64"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"text (the default) or base64, for binary content"`
	Mode      string `json:"mode,omitempty" jsonschema:"permission bits in octal, e.g. 0755 for an executable script; absent means 0644 for a new file"`
}

type fileWriteOut struct {
	Path string `json:"path" jsonschema:"the absolute path written"`
	Size int64  `json:"size" jsonschema:"bytes written"`
}

type fileListIn struct {
	SandboxID string `json:"sandboxId" jsonschema:"the sandbox to look in"`
	Path      string `json:"path,omitempty" jsonschema:"the directory, absolute or relative to /workspace; absent means /workspace"`
}

type entryOut struct {
	Name       string `json:"name"`
	Type       string `json:"type" jsonschema:"file, dir, symlink or other"`
	Size       int64  `json:"size"`
	Mode       string `json:"mode" jsonschema:"permission bits in octal"`
	ModTime    string `json:"mtime"`
	LinkTarget string `json:"linkTarget,omitempty"`
}

type fileListOut struct {
	Path    string     `json:"path"`
	Entries []entryOut `json:"entries"`
	Note    string     `json:"note,omitempty"`
}

func (t *tools) registerFiles(s *mcp.Server) {
	mcp.AddTool(s, &mcp.Tool{
		Name:  "file_read",
		Title: "Read a file",
		Description: `Read a file in a sandbox, or a part of it: up to "length" bytes (default 32 KiB, at most 256 KiB) from "offset".
UTF-8 content comes back as text, anything else as base64 (see "encoding"). If the file goes on, the result says so and gives nextOffset to read the next part.`,
		InputSchema: inputSchema[fileReadIn](map[string]prop{
			"sandboxId": nonEmpty, "path": nonEmpty,
			"offset": atLeast(0), "length": all(atLeast(0), byDefault(readDefault)),
		}),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in fileReadIn) (*mcp.CallToolResult, fileReadOut, error) {
		out, err := t.readFile(ctx, in)
		if err != nil {
			return nil, fileReadOut{}, t.explain(err)
		}
		return nil, out, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:  "file_write",
		Title: "Write a file",
		Description: `Create or replace a file in a sandbox with the given content. The write is atomic: readers see the old or the new file, never a part.
Missing parent directories are created. For binary content, pass it base64-encoded with encoding "base64". Set mode "0755" to make a script executable.`,
		InputSchema: inputSchema[fileWriteIn](map[string]prop{
			"sandboxId": nonEmpty, "path": nonEmpty,
			"encoding": all(enum("text", "base64"), byDefault("text")),
		}),
		Annotations: &mcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in fileWriteIn) (*mcp.CallToolResult, fileWriteOut, error) {
		var data []byte
		switch in.Encoding {
		case "", "text":
			data = []byte(in.Content)
		case "base64":
			b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(in.Content))
			if err != nil {
				return nil, fileWriteOut{}, fmt.Errorf("content is not valid base64 (encoding is base64): %w", err)
			}
			data = b
		default:
			return nil, fileWriteOut{}, fmt.Errorf("encoding %q: want text or base64", in.Encoding)
		}
		mode, err := parseMode(in.Mode)
		if err != nil {
			return nil, fileWriteOut{}, err
		}
		res, err := t.c.WriteFile(ctx, in.SandboxID, in.Path, bytes.NewReader(data), mode)
		if err != nil {
			return nil, fileWriteOut{}, t.explain(err)
		}
		return nil, fileWriteOut{Path: res.Path, Size: res.Size}, nil
	})

	mcp.AddTool(s, &mcp.Tool{
		Name:        "file_list",
		Title:       "List a directory",
		Description: "List a directory in a sandbox: each entry's name, type (file, dir, symlink, other), size, permission bits and modification time. Not recursive; at most 1000 entries are returned.",
		InputSchema: inputSchema[fileListIn](map[string]prop{"sandboxId": nonEmpty, "path": byDefault("/workspace")}),
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, func(ctx context.Context, _ *mcp.CallToolRequest, in fileListIn) (*mcp.CallToolResult, fileListOut, error) {
		if in.Path == "" {
			in.Path = "/workspace"
		}
		list, err := t.c.ListDir(ctx, in.SandboxID, in.Path)
		if err != nil {
			return nil, fileListOut{}, t.explain(err)
		}
		out := fileListOut{Path: list.Path, Entries: []entryOut{}}
		entries := list.Entries
		if len(entries) > maxListEntries {
			out.Note = omittedCount(len(entries)-maxListEntries, "entries") + "; use exec (e.g. ls or find with a pattern) to look for something specific"
			entries = entries[:maxListEntries]
		}
		for _, e := range entries {
			out.Entries = append(out.Entries, entryOut{
				Name: e.Name, Type: e.Type, Size: e.Size, Mode: e.Mode.String(),
				ModTime: e.ModTime.UTC().Format(time.RFC3339), LinkTarget: e.LinkTarget,
			})
		}
		return nil, out, nil
	})
}

func (t *tools) readFile(ctx context.Context, in fileReadIn) (fileReadOut, error) {
	if in.Offset < 0 {
		return fileReadOut{}, errdefs.Invalid("offset", "must not be negative")
	}
	length := in.Length
	var notes []string
	switch {
	case length <= 0:
		length = readDefault
	case length > readMax:
		notes = append(notes, fmt.Sprintf("length was lowered to the maximum, %d bytes", readMax))
		length = readMax
	}
	// Stat first, for the size and so that a directory gets advice
	// rather than the read's error.
	info, err := t.c.Stat(ctx, in.SandboxID, in.Path)
	if err != nil {
		return fileReadOut{}, err
	}
	if info.Type == client.FileTypeDir {
		return fileReadOut{}, fmt.Errorf("%s is a directory: list it with file_list", info.Path)
	}
	// One byte more than asked tells whether the file goes on, also for
	// files whose size stat cannot tell (a symlink's target, /proc files).
	rc, err := t.c.ReadFile(ctx, in.SandboxID, in.Path, &client.RangeOptions{Offset: in.Offset, Length: length + 1})
	if err != nil {
		return fileReadOut{}, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, length+1))
	if err != nil {
		return fileReadOut{}, fmt.Errorf("read %s: %w", in.Path, err)
	}
	more := int64(len(data)) > length
	if more {
		data = data[:length]
	}
	content, enc, n := textOrBase64(data, !more)
	out := fileReadOut{Path: info.Path, Offset: in.Offset, Length: int64(n), Encoding: enc, Content: content, EOF: !more && n == len(data)}
	if info.Type == client.FileTypeFile {
		out.Size = ptr(info.Size)
	}
	if !out.EOF {
		out.NextOffset = ptr(in.Offset + int64(n))
		rest := "the file goes on"
		if out.Size != nil {
			rest = fmt.Sprintf("%d more bytes follow", *out.Size-*out.NextOffset)
		}
		notes = append(notes, fmt.Sprintf("%s: read them with offset %d", rest, *out.NextOffset))
	}
	if enc == "base64" {
		notes = append(notes, "the bytes are not UTF-8 text, so content is base64")
	}
	out.Note = strings.Join(notes, "; ")
	return out, nil
}

// parseMode reads octal permission bits such as "0755" or "755".
func parseMode(s string) (fs.FileMode, error) {
	if s == "" {
		return 0, nil
	}
	v, err := wire.ParseFileMode(s)
	if err != nil {
		return 0, fmt.Errorf("%w; want octal permission bits such as 0644 or 0755", err)
	}
	m := v.FS()
	if m == 0 {
		// WriteFile reads 0 as "the default"; the API rejects nothing for 0000.
		return 0, fmt.Errorf("mode %q: a file nobody may read or write is surely a mistake; give e.g. 0644", s)
	}
	return m, nil
}
