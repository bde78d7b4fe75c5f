package stepbuild

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/internal/errdefs"
)

func TestParse(t *testing.T) {
	t.Parallel()
	p, err := Parse([]byte(`# syntax=docker/dockerfile:1
ARG TAG=12
FROM debian:${TAG} AS base

# a comment
run apt-get update && \
    # a comment inside
    apt-get install -y curl
RUN ["/bin/echo", "exec", "form"]
ENV A=1 B="two words" C=with\ space D='$X'
ENV LEGACY the rest of the line
LABEL "team"=ml version=1
ARG NOVALUE
WORKDIR /opt/app
USER nobody
COPY --chown=nobody:nogroup a b /dst/
COPY ["with space", "/x"]
ADD archive.tar.gz /opt/
SHELL ["/bin/bash", "-c"]
EXPOSE 8080
CMD ["run"]
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Stages) != 1 || p.Stages[0].From != "debian:${TAG}" || p.Stages[0].Name != "base" || p.Stages[0].Line != 3 || len(p.PreArgs) != 1 || p.PreArgs[0] != (KV{"TAG", "12", true}) {
		t.Errorf("stages %+v, pre-args %+v", p.Stages, p.PreArgs)
	}
	type short struct {
		Line  int
		Op    string
		Shell string
		Exec  []string
		Src   []string
		Dest  string
		Chown string
		KVs   []KV
		Arg   string
	}
	var got []short
	for _, s := range p.Stages[0].Steps {
		got = append(got, short{s.Line, s.Op, s.Shell, s.Exec, s.Sources, s.Dest, s.Chown, s.KVs, s.Arg})
	}
	want := []short{
		{Line: 6, Op: OpRun, Shell: "apt-get update &&  apt-get install -y curl"},
		{Line: 9, Op: OpRun, Exec: []string{"/bin/echo", "exec", "form"}},
		{Line: 10, Op: OpEnv, KVs: []KV{{"A", "1", true}, {"B", "two words", true}, {"C", "with space", true}, {"D", `\$X`, true}}},
		{Line: 11, Op: OpEnv, KVs: []KV{{"LEGACY", "the rest of the line", true}}},
		{Line: 12, Op: OpLabel, KVs: []KV{{"team", "ml", true}, {"version", "1", true}}},
		{Line: 13, Op: OpArg, KVs: []KV{{"NOVALUE", "", false}}},
		{Line: 14, Op: OpWorkdir, Arg: "/opt/app"},
		{Line: 15, Op: OpUser, Arg: "nobody"},
		{Line: 16, Op: OpCopy, Src: []string{"a", "b"}, Dest: "/dst/", Chown: "nobody:nogroup"},
		{Line: 17, Op: OpCopy, Src: []string{"with space"}, Dest: "/x"},
		{Line: 18, Op: OpAdd, Src: []string{"archive.tar.gz"}, Dest: "/opt/"},
		{Line: 19, Op: OpShell, Exec: []string{"/bin/bash", "-c"}},
		{Line: 20, Op: OpNote},
		{Line: 21, Op: OpNote},
	}
	if len(got) != len(want) {
		t.Fatalf("steps:\n got %+v\nwant %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Line != w.Line || g.Op != w.Op || g.Shell != w.Shell || !slices.Equal(g.Exec, w.Exec) || !slices.Equal(g.Src, w.Src) ||
			g.Dest != w.Dest || g.Chown != w.Chown || !slices.Equal(g.KVs, w.KVs) || g.Arg != w.Arg {
			t.Errorf("step %d:\n got %+v\nwant %+v", i, g, w)
		}
	}
}

// TestHeredocs: RUN's and COPY's here-documents, as BuildKit takes them.
func TestHeredocs(t *testing.T) {
	t.Parallel()
	p, err := Parse([]byte("FROM img\n" +
		"ARG NAME=world\n" +
		"RUN <<EOF\necho one\necho two\nEOF\n" +
		"RUN <<-EOT\n\t#!/usr/bin/env python3\n\tprint('hi')\n\tEOT\n" +
		"RUN cat <<EOF > /etc/motd && echo \"x<<NOT\"\nhello $NAME\nEOF\n" +
		"COPY <<EOF /etc/greeting\nhello ${NAME}\nEOF\n" +
		"COPY --chmod=700 <<'A' <<B /conf/\nraw $NAME\nA\nb\nB\n" +
		"ENV AFTER=1\n"))
	if err != nil {
		t.Fatal(err)
	}
	steps := p.Stages[0].Steps
	if len(steps) != 7 || steps[6].Op != OpEnv || steps[6].Line != 22 {
		t.Fatalf("steps: %+v", steps)
	}
	box := &fakeBox{}
	if _, err := buildOne(t, p, tarContext(t, nil), box, nil); err != nil {
		t.Fatal(err)
	}
	wantRuns := [][]string{
		{"/bin/sh", "-c", "echo one\necho two\n"},
		{"/bin/sh", "-c", "/usr/bin/env python3 <<'HOTCELL_HEREDOC_END'\n#!/usr/bin/env python3\nprint('hi')\nHOTCELL_HEREDOC_END"},
		{"/bin/sh", "-c", "cat <<EOF > /etc/motd && echo \"x<<NOT\"\nhello $NAME\nEOF"},
	}
	if len(box.runs) != len(wantRuns) {
		t.Fatalf("runs %+v", box.runs)
	}
	for i, w := range wantRuns {
		if !slices.Equal(box.runs[i].argv, w) {
			t.Errorf("run %d: %q, want %q", i, box.runs[i].argv, w)
		}
	}
	wantFiles := map[string]map[string]string{
		"/etc":  {"greeting": "hello world\n"},
		"/conf": {"A": "raw $NAME\n", "B": "b\n"},
	}
	if !maps.EqualFunc(box.extracts, wantFiles, maps.Equal) {
		t.Errorf("files: %q, want %q", box.extracts, wantFiles)
	}
	if box.modes["/conf/A"] != 0o700 || box.modes["/etc/greeting"] != 0o644 {
		t.Errorf("modes: %v", box.modes)
	}
	for _, tc := range []struct{ dockerfile, says string }{
		{"FROM a\nRUN <<EOF\necho\n", "line 2: the here-document \"EOF\" has no end line"},
		{"FROM a\nCOPY <<EOF file /x/\nx\nEOF\n", "a COPY of here-documents takes no other source"},
	} {
		if _, err := Parse([]byte(tc.dockerfile)); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("Parse(%q): got %v, want %q", tc.dockerfile, err, tc.says)
		}
	}
}

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ dockerfile, says string }{
		{"", "has no FROM"},
		{"RUN true\nFROM x", "line 1: RUN: comes before FROM"},
		{"FROM a AS x\nFROM b AS X", "line 2: FROM: the stage name \"X\" is taken by an earlier stage"},
		{"FROM a AS 1x", "line 1: FROM: \"1x\" is not a stage name"},
		{"FROM a AS x\nCOPY --from=x /a /b", "line 2: COPY: --from=\"x\" is the stage this step is in"},
		{"FROM a\nCOPY --from=0 /a /b", "--from=\"0\" is the stage this step is in"},
		{"FROM a\nFROM b\nCOPY --from=2 /a /b", "line 3: COPY: --from=2: there are 1 stages before this one"},
		{"FROM a\nCOPY --from=$X /a /b", "a variable is not taken in --from here"},
		{"FROM a\nCOPY --from= /a /b", "--from names nothing"},
		{"FROM a\nFROM b\nCOPY --from=0 /a*/x.so /b/", "\"/a*/x.so\": with --from a wildcard is taken in the last name only"},
		{"FROM a\nFROM b\nCOPY --from=0 /a/[x /b/", "\"/a/[x\": syntax error in pattern"},
		{"FROM a\nADD --from=b /x /y", "line 2: ADD: \"--from=b\" is not taken here (only --chown, --chmod and --link)"},
		{"FROM a\nCOPY --chmod=9 /x /y", "line 2: COPY: \"--chmod=9\": want an octal mode"},
		{"FROM a\nCOPY --chmod=17777 /x /y", "want an octal mode"},
		{"FROM --platform=linux/arm64 a", "line 1: FROM: \"--platform=linux/arm64\" is not taken here"},
		{"FROM a b", "want FROM image [AS name]"},
		{"FROM a\nRUN --mount=type=ssh true", "line 2: RUN: \"--mount=type=ssh\": ssh mounts are not taken here"},
		{"FROM a\nRUN --mount=type=cache true", "a cache mount needs a target"},
		{"FROM a\nRUN --mount=type=bogus,target=/x true", "\"bogus\" is not a mount type"},
		{"FROM a\nRUN --mount=type=cache,target=/x,frob=1 true", "\"frob\" is not a mount option"},
		{"FROM a\nRUN --mount=type=cache,target=/x,from=a true", "from is for a bind mount"},
		{"FROM a\nRUN --mount=target=/x,from=0 true", "--from=\"0\" is the stage this step is in"},
		{"FROM a\nRUN --security=insecure true", "\"--security=insecure\" is not taken here (only --mount and --network)"},
		{"FROM a\nRUN --network=host true", "\"--network=host\" is not taken here (default, or none)"},
		{"FROM a\nRUN --mount=type=cache,target=/x", "line 2: RUN: runs nothing"},
		{"FROM a\nCOPY --parents /x /y", "line 2: COPY: \"--parents\" is not taken here (only --chown, --chmod, --link and --from)"},
		{"FROM a\nADD https://example.com/x /x", "a URL; fetch it in a RUN step"},
		{"FROM a\nCOPY onlyone", "want sources and a destination"},
		{"FROM a\nENV", "names nothing"},
		{"FROM a\nENV A=\"open", "a quote is not closed"},
		{"FROM a\nENV =x", "is not a variable name"},
		{"FROM a\nARG BAD$NAME", "is not a variable name"},
		{"FROM a\nSHELL /bin/bash", "want a JSON array"},
		{"FROM a\nONBUILD RUN true", "ONBUILD: is not taken here"},
		{"FROM a\nFROBNICATE", "is not a Dockerfile instruction"},
		{"# escape=`\nFROM a", "the escape directive is not taken here"},
		{"FROM a\nWORKDIR", "WORKDIR: is empty"},
	} {
		_, err := Parse([]byte(tc.dockerfile))
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "dockerfile") {
			t.Errorf("Parse(%q): got %v, want invalid dockerfile saying %q", tc.dockerfile, err, tc.says)
		}
	}
}

func TestExpand(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"A": "a", "EMPTY": "", "P": "/opt"}
	for in, want := range map[string]string{
		"plain":           "plain",
		"$A":              "a",
		"${A}b":           "ab",
		"$Ab":             "",
		"${MISSING:-def}": "def",
		"${EMPTY:-def}":   "def",
		"${A:-def}":       "a",
		"${A:+alt}":       "alt",
		"${EMPTY:+alt}":   "",
		`\$A`:             "$A",
		"$P/bin:$A":       "/opt/bin:a",
		"cost $5":         "cost $5",
		"end$":            "end$",
		"$ space":         "$ space",
	} {
		got, err := expand(in, vars)
		if err != nil || got != want {
			t.Errorf("expand(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"${A", "${A:?x}", "${1A}", "${}"} {
		if _, err := expand(bad, vars); err == nil {
			t.Errorf("expand(%q): got no error", bad)
		}
	}
}

func TestIgnore(t *testing.T) {
	t.Parallel()
	ig, err := readIgnore(tarContext(t, map[string]string{".dockerignore": "# comment\n*.key\n**/*.log\nbuild\n!build/keep.txt\n/abs/*\ndocs/[ab]?.md\n"}))
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{
		"x.key": true, "sub/x.key": false, "a.log": true, "a/b/c.log": true,
		"build": true, "build/out.bin": true, "build/keep.txt": false,
		"abs/x": true, "abs/x/y": true, "abs": false,
		"docs/a1.md": true, "docs/c1.md": false, "main.go": false,
	} {
		if got := ig.ignored(name); got != want {
			t.Errorf("ignored(%q) = %v, want %v", name, got, want)
		}
	}
}

// fakeBox records what a build asks of a box.
type fakeBox struct {
	runs     []fakeRun
	mkdirs   []string
	extracts map[string]map[string]string // dir -> name -> content ("<dir>", "-> target")
	exit     int
	exits    map[string]int    // a command's exit code, over exit
	present  map[string]bool   // paths Move finds
	ops      []string          // mkdir, move, remove, extract and run, in order
	files    map[string]string // what Archive reads: path -> content
	modes    map[string]int64  // the mode of each entry extracted, by its path
	n        int               // its number among the boxes started
	dropped  bool
}

// Archive answers from files: a path's file, or a directory's files.
func (f *fakeBox) Archive(_ context.Context, p string) (io.ReadCloser, bool, error) {
	f.ops = append(f.ops, "archive "+p)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	put := func(name, body string) {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(body)), Typeflag: tar.TypeReg, Uid: 1000})
		tw.Write([]byte(body))
	}
	if body, ok := f.files[p]; ok {
		put(path.Base(p), body)
		tw.Close()
		return io.NopCloser(&buf), false, nil
	}
	n := 0
	for _, name := range slices.Sorted(maps.Keys(f.files)) {
		if rel, ok := strings.CutPrefix(name, strings.TrimSuffix(p, "/")+"/"); ok {
			put(rel, f.files[name])
			n++
		}
	}
	if n == 0 {
		return nil, false, fmt.Errorf("%s: %w", p, errdefs.ErrNotFound)
	}
	tw.Close()
	return io.NopCloser(&buf), true, nil
}

// List answers from files: the names under directory dir, a name with
// files under it being a directory.
func (f *fakeBox) List(_ context.Context, dir string) (map[string]bool, error) {
	f.ops = append(f.ops, "list "+dir)
	if _, ok := f.files[dir]; ok {
		return nil, errdefs.Invalid("path", "%s is not a directory", dir)
	}
	m := map[string]bool{}
	for name := range f.files {
		if rel, ok := strings.CutPrefix(name, strings.TrimSuffix(dir, "/")+"/"); ok {
			top, rest, _ := strings.Cut(rel, "/")
			m[top] = m[top] || rest != ""
		}
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("%s: %w", dir, errdefs.ErrNotFound)
	}
	return m, nil
}

// fakeBoxes starts fakeBoxes: the first one given, then new ones whose
// files are the image's.
type fakeBoxes struct {
	first   *fakeBox
	files   map[string]map[string]string // image -> path -> content
	missing string                       // an image there is none of
	boxes   []*fakeBox
	events  []string
}

func (f *fakeBoxes) Start(_ context.Context, image string) (Box, error) {
	if image == f.missing {
		return nil, fmt.Errorf("pull %s: %w", image, errdefs.ErrNotFound)
	}
	b := f.first
	if b == nil || len(f.boxes) > 0 {
		b = &fakeBox{files: f.files[image]}
	}
	f.boxes = append(f.boxes, b)
	b.n = len(f.boxes)
	f.events = append(f.events, fmt.Sprintf("start #%d %s", b.n, image))
	return b, nil
}

func (f *fakeBoxes) Save(_ context.Context, box Box, env map[string]string) (string, error) {
	b := box.(*fakeBox)
	name := fmt.Sprintf("saved-%d", b.n)
	f.events = append(f.events, fmt.Sprintf("save #%d %v", b.n, env))
	return name, nil
}

func (f *fakeBoxes) Drop(_ context.Context, box Box) error {
	b := box.(*fakeBox)
	if b.dropped {
		return fmt.Errorf("box #%d dropped twice", b.n)
	}
	b.dropped = true
	f.events = append(f.events, fmt.Sprintf("drop #%d", b.n))
	return nil
}

// build runs p in box, the one box a one-stage plan starts.
func buildOne(t *testing.T, p Plan, bctx Context, box *fakeBox, progress func(string)) (Result, error) {
	t.Helper()
	boxes := &fakeBoxes{first: box}
	last, res, err := Build(t.Context(), p, bctx, boxes, progress)
	if err == nil && last != Box(box) {
		t.Errorf("Build returned box %v, want the one it started", last)
	}
	if err != nil && !box.dropped {
		t.Errorf("a failed build did not drop its box")
	}
	return res, err
}

type fakeRun struct {
	argv      []string
	env       map[string]string
	cwd, user string
}

func (f *fakeBox) Run(_ context.Context, argv []string, env map[string]string, cwd, user string, out func([]byte)) (int, error) {
	f.runs = append(f.runs, fakeRun{argv, env, cwd, user})
	f.ops = append(f.ops, "run "+argv[0])
	out([]byte("out of " + argv[0] + "\n"))
	if code, ok := f.exits[argv[0]]; ok {
		return code, nil
	}
	return f.exit, nil
}

func (f *fakeBox) Mkdir(_ context.Context, dir string) error {
	f.mkdirs = append(f.mkdirs, dir)
	f.ops = append(f.ops, "mkdir "+dir)
	return nil
}

func (f *fakeBox) Move(_ context.Context, from, to string) error {
	if !f.present[from] {
		return fmt.Errorf("move %s: %w", from, errdefs.ErrNotFound)
	}
	delete(f.present, from)
	f.present[to] = true
	f.ops = append(f.ops, "move "+from+" "+to)
	return nil
}

func (f *fakeBox) Remove(_ context.Context, p string) error {
	f.ops = append(f.ops, "remove "+p)
	return nil
}

func (f *fakeBox) Extract(_ context.Context, dir string, r io.Reader) error {
	f.ops = append(f.ops, "extract "+dir)
	if f.extracts == nil {
		f.extracts = map[string]map[string]string{}
	}
	m := f.extracts[dir]
	if m == nil {
		m = map[string]string{}
	}
	b, _ := io.ReadAll(r)
	if bytes.HasPrefix(b, []byte{0x1f, 0x8b}) {
		m["<gzip>"] = string(rune(len(b)))
		f.extracts[dir] = m
		return nil
	}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(tr)
		if f.modes == nil {
			f.modes = map[string]int64{}
		}
		f.modes[path.Join(dir, h.Name)] = h.Mode
		switch h.Typeflag {
		case tar.TypeDir:
			m[h.Name] = "<dir>"
		case tar.TypeSymlink:
			m[h.Name] = "-> " + h.Linkname
		default:
			m[h.Name] = string(body)
		}
	}
	f.extracts[dir] = m
	return nil
}

type bytesContext []byte

func (b bytesContext) Open() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }

func tarContext(t *testing.T, files map[string]string) bytesContext {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		body := files[name]
		h := &tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}
		if target, ok := strings.CutPrefix(body, "-> "); ok {
			h = &tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target}
		}
		if target, ok := strings.CutPrefix(body, "=> "); ok {
			h = &tar.Header{Name: name, Typeflag: tar.TypeLink, Linkname: target}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte(body))
		}
	}
	tw.Close()
	return bytesContext(buf.Bytes())
}

func TestRun(t *testing.T) {
	t.Parallel()
	bctx := tarContext(t, map[string]string{
		"Dockerfile": "unused", "app/main.go": "main", "app/sub/x.go": "x", "app/skip.key": "secret",
		"one.txt": "one", "two.txt": "two", "link": "-> one.txt", "pkg.tar.gz": "\x1f\x8bnot really", ".dockerignore": "**/*.key\n",
	})
	p, err := Parse([]byte(`FROM img
ARG V=1
ENV HOME_DIR=/opt/app PATH_ADD=$V LIT='$V' ESC=\$V
WORKDIR $HOME_DIR
COPY app/ ./
COPY one.txt renamed.txt
COPY *.txt /texts/
COPY --chown=nobody link /l
ADD pkg.tar.gz /pkgs/
USER nobody
SHELL ["/bin/bash", "-c"]
RUN echo $V
LABEL from=$HOME_DIR
`))
	if err != nil {
		t.Fatal(err)
	}
	box := &fakeBox{}
	var log []string
	res, err := buildOne(t, p, bctx, box, func(s string) { log = append(log, s) })
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(res.Env, map[string]string{"HOME_DIR": "/opt/app", "PATH_ADD": "1", "LIT": "$V", "ESC": "$V"}) || !maps.Equal(res.Labels, map[string]string{"from": "/opt/app"}) {
		t.Errorf("result %+v", res)
	}
	wantExtracts := map[string]map[string]string{
		"/opt/app": {"main.go": "main", "sub/x.go": "x", "renamed.txt": "one"},
		"/texts":   {"one.txt": "one", "two.txt": "two"},
		"/":        {"l": "-> one.txt"},
		"/pkgs":    {"<gzip>": string(rune(len("\x1f\x8bnot really")))},
	}
	for dir, want := range wantExtracts {
		if got := box.extracts[dir]; !maps.Equal(got, want) {
			t.Errorf("extracted into %s: got %q, want %q", dir, got, want)
		}
	}
	runEnv := map[string]string{"V": "1", "HOME_DIR": "/opt/app", "PATH_ADD": "1", "LIT": "$V", "ESC": "$V"}
	wantRuns := []fakeRun{
		{[]string{"chown", "-R", "--", "nobody", "/l"}, runEnv, "/", ""},
		{[]string{"/bin/bash", "-c", "echo $V"}, runEnv, "/opt/app", "nobody"},
	}
	if len(box.runs) != len(wantRuns) {
		t.Fatalf("runs: got %+v, want %+v", box.runs, wantRuns)
	}
	for i, w := range wantRuns {
		g := box.runs[i]
		if !slices.Equal(g.argv, w.argv) || !maps.Equal(g.env, w.env) || g.cwd != w.cwd || g.user != w.user {
			t.Errorf("run %d: got %+v, want %+v", i, g, w)
		}
	}
	if !slices.Equal(box.mkdirs, []string{"/opt/app"}) {
		t.Errorf("directories made: %q, want the WORKDIR", box.mkdirs)
	}
	if !slices.Contains(log, "Step 12/13 : RUN echo $V") || !slices.Contains(log, "out of /bin/bash") {
		t.Errorf("log: %q", log)
	}
}

func TestRunCopySingleFile(t *testing.T) {
	t.Parallel()
	bctx := tarContext(t, map[string]string{"one.txt": "one"})
	p, err := Parse([]byte("FROM img\nWORKDIR /w\nCOPY one.txt renamed.txt\n"))
	if err != nil {
		t.Fatal(err)
	}
	box := &fakeBox{}
	if _, err := buildOne(t, p, bctx, box, nil); err != nil {
		t.Fatal(err)
	}
	if got := box.extracts["/w"]; !maps.Equal(got, map[string]string{"renamed.txt": "one"}) {
		t.Errorf("extracted into /w: %q", got)
	}
}

// TestRunChmod: COPY --chmod gives its files and directories the mode,
// from the context and from another box; --link changes nothing.
func TestRunChmod(t *testing.T) {
	t.Parallel()
	bctx := tarContext(t, map[string]string{"run.sh": "#!/bin/sh", "d/x": "x", "a.tgz": "\x1f\x8b"})
	p, err := Parse([]byte("FROM img AS one\nFROM img\nCOPY --chmod=755 --link run.sh /usr/local/bin/run\nCOPY --chmod=0600 d /secret/\nCOPY --from=one --chmod=700 /f /g\n"))
	if err != nil {
		t.Fatal(err)
	}
	boxes := &fakeBoxes{files: map[string]map[string]string{"img": {"/f": "f"}}}
	last, _, err := Build(t.Context(), p, bctx, boxes, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"/usr/local/bin/run": 0o755, "/secret/x": 0o600, "/g": 0o700}
	if got := last.(*fakeBox).modes; !maps.Equal(got, want) {
		t.Errorf("modes: %v, want %v (octal 755, 600, 700)", got, want)
	}
	p, _ = Parse([]byte("FROM img\nADD --chmod=644 a.tgz /x/\n"))
	if _, err := buildOne(t, p, bctx, &fakeBox{}, nil); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "--chmod is not taken with it") {
		t.Errorf("ADD --chmod of an archive: got %v", err)
	}
}

func TestRunChownNewDir(t *testing.T) {
	t.Parallel()
	bctx := tarContext(t, map[string]string{"d/x": "x", "d/y": "y"})
	p, err := Parse([]byte("FROM img\nCOPY --chown=app d/ /new/\n"))
	if err != nil {
		t.Fatal(err)
	}
	box := &fakeBox{exits: map[string]int{"test": 1}}
	if _, err := buildOne(t, p, bctx, box, nil); err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"test", "-e", "/new"}, {"chown", "-R", "--", "app", "/new/x", "/new/y", "/new"}}
	if len(box.runs) != len(want) || !slices.Equal(box.runs[0].argv, want[0]) || !slices.Equal(box.runs[1].argv, want[1]) {
		t.Errorf("runs %+v, want %q: a destination the COPY made gets the --chown", box.runs, want)
	}
}

// TestRunMounts: RUN's mounts are in place for the command and gone
// after, what was at a target back where it was.
func TestRunMounts(t *testing.T) {
	t.Parallel()
	bctx := tarContext(t, map[string]string{"app/main.go": "main", "app/x.key": "k", ".dockerignore": "**/*.key"})
	p, err := Parse([]byte("FROM img\nWORKDIR /w\n" +
		"RUN --mount=type=cache,target=/root/.cache --mount=type=bind,source=app,target=src --mount=type=secret,id=tok --network=none make\n"))
	if err != nil {
		t.Fatal(err)
	}
	box := &fakeBox{present: map[string]bool{"/root/.cache": true}}
	var log []string
	if _, err := buildOne(t, p, bctx, box, func(s string) { log = append(log, s) }); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"mkdir /w",
		"move /root/.cache /root/.cache.hotcell-mount-0", "mkdir /root/.cache",
		"extract /w/src",
		"run /bin/sh",
		"remove /w/src",
		"remove /root/.cache", "move /root/.cache.hotcell-mount-0 /root/.cache",
	}
	if !slices.Equal(box.ops, want) {
		t.Errorf("ops:\n got %q\nwant %q", box.ops, want)
	}
	if got := box.extracts["/w/src"]; !maps.Equal(got, map[string]string{"main.go": "main"}) {
		t.Errorf("the bind mount's files: %q", got)
	}
	for _, w := range []string{" ---> the secret \"tok\" is not given: template builds take none", " ---> --network=none: the step runs on the build's network (template_build_network)"} {
		if !slices.Contains(log, w) {
			t.Errorf("log lacks %q: %q", w, log)
		}
	}

	// A required secret fails the step; the mounts before it are taken away.
	p, _ = Parse([]byte("FROM img\nRUN --mount=type=cache,target=/c --mount=type=secret,id=tok,required=true make\n"))
	box = &fakeBox{present: map[string]bool{}}
	_, err = buildOne(t, p, bctx, box, nil)
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "line 2: RUN: the secret \"tok\": template builds are given no secrets") {
		t.Errorf("a required secret: got %v", err)
	}
	if want := []string{"mkdir /c", "remove /c", "mkdir /c"}; !slices.Equal(box.ops, want) {
		t.Errorf("ops: got %q, want %q", box.ops, want)
	}
}

func TestRunFails(t *testing.T) {
	t.Parallel()
	bctx := tarContext(t, map[string]string{"a.txt": "a", "b.txt": "b", "x.key": "k", ".dockerignore": "*.key", "p.tar.xz": "xz", "q.tgz": "gz", "hard": "=> a.txt"})
	for _, tc := range []struct {
		dockerfile, says string
		exit             int
	}{
		{"FROM i\nCOPY missing /x", "line 2: COPY: \"missing\": no such file or directory in the build context", 0},
		{"FROM i\nCOPY x.key /x", "line 2: COPY: \"x.key\": no such file or directory in the build context (or .dockerignore leaves it out)", 0},
		{"FROM i\nCOPY *.txt /dir", "line 2: COPY: when copying more than one source the destination must be a directory and end with a /", 0},
		{"FROM i\nADD p.tar.xz /x/", "line 2: ADD: \"p.tar.xz\": only .tar, .tar.gz and .tgz archives are unpacked here", 0},
		{"FROM i\nADD q.tgz a.txt /x/", "line 2: ADD: \"q.tgz\": an archive is unpacked alone here", 0},
		{"FROM i\nCOPY hard /x", "\"hard\" is a hard link: the build context's hard links are not taken here", 0},
		{"FROM i\nRUN false", "line 2: RUN: the command \"/bin/sh -c false\" returned a non-zero code: 2", 2},
		{"FROM i\nUSER a:b", "line 2: USER: \"a:b\": a group is not taken here", 0},
		{"FROM i\nENV A=${B", "line 2: ENV: \"${B\": a ${ with no }", 0},
	} {
		p, err := Parse([]byte(tc.dockerfile))
		if err != nil {
			t.Fatalf("%q: %v", tc.dockerfile, err)
		}
		_, err = buildOne(t, p, bctx, &fakeBox{exit: tc.exit}, nil)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%q: got %v, want invalid saying %q", tc.dockerfile, err, tc.says)
		}
	}
}

func TestBuildStages(t *testing.T) {
	t.Parallel()
	p, err := Parse([]byte(`ARG V=7
ARG REG=r.example
FROM $REG/img:${TAG:-1} AS base
ENV E=base
WORKDIR /w
FROM base AS build
ARG V
RUN make $V
FROM other AS unused
RUN exit 1
FROM base AS mid
FROM mid
COPY --from=build /out/app /usr/bin/app
COPY --from=1 /out/ /opt/
COPY --from=tools:1 --chown=nobody /bin/tool /usr/bin/
ENV F=final
`))
	if err != nil {
		t.Fatal(err)
	}
	boxes := &fakeBoxes{files: map[string]map[string]string{
		"saved-1": {"/out/app": "app", "/out/lib/x.so": "so"},
		"tools:1": {"/bin/tool": "tool"},
	}}
	var log []string
	last, res, err := Build(t.Context(), p, tarContext(t, nil), boxes, func(s string) { log = append(log, s) })
	if err != nil {
		t.Fatal(err)
	}
	// base has two stages built on it: saved, then dropped. build is
	// copied from by the last stage: its box lives until then. mid's box
	// goes on as the last stage's. unused is not needed, so not run.
	wantEvents := []string{
		"start #1 r.example/img:1",
		"save #1 map[E:base]",
		"drop #1",
		"start #2 saved-1",
		"start #3 saved-1",
		"start #4 tools:1",
		"drop #2",
		"drop #4",
	}
	if !slices.Equal(boxes.events, wantEvents) {
		t.Errorf("boxes:\n got %q\nwant %q", boxes.events, wantEvents)
	}
	final := boxes.boxes[2]
	if last != Box(final) || final.dropped {
		t.Errorf("the last stage's box is #%d (dropped %v), want #3 kept", last.(*fakeBox).n, final.dropped)
	}
	if !maps.Equal(res.Env, map[string]string{"E": "base", "F": "final"}) {
		t.Errorf("the image's env: %v", res.Env)
	}
	if r := boxes.boxes[1].runs; len(r) != 1 || !slices.Equal(r[0].argv, []string{"/bin/sh", "-c", "make $V"}) || r[0].cwd != "/w" ||
		!maps.Equal(r[0].env, map[string]string{"E": "base", "V": "7"}) {
		t.Errorf("stage build's RUN: %+v, want make in /w with the base's ENV and the global ARG", r)
	}
	wantExtracts := map[string]map[string]string{
		"/usr/bin": {"app": "app", "tool": "tool"},
		"/opt":     {"app": "app", "lib/x.so": "so"},
	}
	if !maps.EqualFunc(final.extracts, wantExtracts, maps.Equal) {
		t.Errorf("extracted into the last box: %q, want %q", final.extracts, wantExtracts)
	}
	// /usr/bin is there (the fake's test -e exits 0): it keeps its owner.
	if r := final.runs; len(r) != 2 || !slices.Equal(r[0].argv, []string{"test", "-e", "/usr/bin"}) || !slices.Equal(r[1].argv, []string{"chown", "-R", "--", "nobody", "/usr/bin/tool"}) {
		t.Errorf("the last box's runs: %+v, want the chown of the tool", r)
	}
	for _, want := range []string{"Step 1/12 : FROM r.example/img:1 AS base", "Step 7/12 : FROM base AS mid", "Step 8/12 : FROM mid", "Step 12/12 : ENV F=final"} {
		if !slices.Contains(log, want) {
			t.Errorf("log has no %q: %q", want, log)
		}
	}
	if slices.ContainsFunc(log, func(s string) bool { return strings.Contains(s, "exit 1") }) {
		t.Errorf("the unneeded stage ran: %q", log)
	}
}

// TestBuildMountFrom: a RUN's bind mount from a stage needs that stage,
// whose box lives until the step is done.
func TestBuildMountFrom(t *testing.T) {
	t.Parallel()
	p, err := Parse([]byte("FROM a AS one\nFROM b AS unused\nFROM b\nRUN --mount=from=one,source=/f,target=/m/f cat /m/f\n"))
	if err != nil {
		t.Fatal(err)
	}
	boxes := &fakeBoxes{files: map[string]map[string]string{"a": {"/f": "from one"}}}
	last, _, err := Build(t.Context(), p, tarContext(t, nil), boxes, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"start #1 a", "start #2 b", "drop #1"}; !slices.Equal(boxes.events, want) {
		t.Errorf("boxes: got %q, want %q", boxes.events, want)
	}
	final := last.(*fakeBox)
	if want := []string{"extract /m", "run /bin/sh", "remove /m/f"}; !slices.Equal(final.ops, want) {
		t.Errorf("ops: got %q, want %q", final.ops, want)
	}
	if got := final.extracts["/m"]; !maps.Equal(got, map[string]string{"f": "from one"}) {
		t.Errorf("the mount's file: %q", got)
	}
}

// TestCopyFromWildcard: a COPY --from source with a wildcard in its last
// name copies each entry it matches: a file, or a directory's contents.
func TestCopyFromWildcard(t *testing.T) {
	t.Parallel()
	p, err := Parse([]byte(`FROM a AS build
FROM b
COPY --from=build /app/target/*.jar /app/app.jar
COPY --from=build /app/target/* /all/
COPY --from=build /app/dist* /web
`))
	if err != nil {
		t.Fatal(err)
	}
	boxes := &fakeBoxes{files: map[string]map[string]string{"a": {
		"/app/target/app-1.jar": "jar", "/app/target/app-1.pom": "pom", "/app/target/lib/x.jar": "x", "/app/dist/index.html": "i",
	}}}
	last, _, err := Build(t.Context(), p, tarContext(t, nil), boxes, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]string{
		"/app": {"app.jar": "jar"},
		"/all": {"app-1.jar": "jar", "app-1.pom": "pom", "x.jar": "x"},
		"/web": {"index.html": "i"},
	}
	if got := last.(*fakeBox).extracts; !maps.EqualFunc(got, want, maps.Equal) {
		t.Errorf("extracted: %q, want %q", got, want)
	}
	// A wildcard's directory is listed by name, and its contents read
	// once, for the copy.
	build := boxes.boxes[0]
	if build.n == last.(*fakeBox).n {
		t.Fatal("the build stage's box is the last one")
	}
	wantOps := []string{"list /app/target", "archive /app/target", "list /app/target", "archive /app/target", "list /app", "archive /app"}
	if !slices.Equal(build.ops, wantOps) {
		t.Errorf("asked of the build stage's box: %q, want %q", build.ops, wantOps)
	}
	for _, tc := range []struct{ copy, says string }{
		{"COPY --from=build /app/target/*.none /x/", "line 3: COPY: \"*.none\": nothing of \"/app/target\" of build matches it"},
		{"COPY --from=build /app/target/*.jar /app/target/*.pom /x", "when copying more than one source the destination must be a directory"},
		{"COPY --from=build /app/target/app-1.jar/* /x/", "\"/app/target/app-1.jar\" of build is not a directory"},
	} {
		p, err := Parse([]byte("FROM a AS build\nFROM b\n" + tc.copy + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		boxes := &fakeBoxes{files: map[string]map[string]string{"a": {"/app/target/app-1.jar": "jar", "/app/target/app-1.pom": "pom"}}}
		if _, _, err := Build(t.Context(), p, tarContext(t, nil), boxes, nil); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: got %v, want invalid saying %q", tc.copy, err, tc.says)
		}
	}
}

func TestBuildStagesFail(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ dockerfile, says string }{
		{"FROM a AS one\nRUN true\nFROM b\nCOPY --from=one /missing /x", "line 4: COPY: \"/missing\" of one: /missing: not found"},
		{"FROM a AS one\nFROM nosuch\nCOPY --from=one /x /y", "line 2: FROM nosuch: pull nosuch:"},
		{"FROM a\nCOPY --from=nosuch /x /y", "line 2: COPY --from nosuch: pull nosuch:"},
		{"FROM a AS one\nFROM b\nCOPY --from=one /f /g /x", "line 3: COPY: when copying more than one source the destination must be a directory"},
		{"ARG X\nFROM $X", "line 2: FROM \"$X\" is empty once its ARGs are substituted"},
	} {
		p, err := Parse([]byte(tc.dockerfile))
		if err != nil {
			t.Fatalf("%q: %v", tc.dockerfile, err)
		}
		boxes := &fakeBoxes{missing: "nosuch", files: map[string]map[string]string{"a": {"/f": "f"}}}
		_, _, err = Build(t.Context(), p, tarContext(t, nil), boxes, nil)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%q: got %v, want invalid saying %q", tc.dockerfile, err, tc.says)
		}
		for _, b := range boxes.boxes {
			if !b.dropped {
				t.Errorf("%q: box #%d left after the failure", tc.dockerfile, b.n)
			}
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("FROM a\nRUN echo $X \\\n && true\nCOPY [\"a\", \"b\"]\nENV A=\"b c\" D=e\n"))
	f.Add([]byte("ARG T=1\nFROM x:$T AS y\nLABEL 'a b'=c\nADD --chown=1:2 a b c/\n"))
	f.Add([]byte("FROM a AS b\nRUN x\nFROM b AS c\nCOPY --from=0 /x /y\nCOPY --from=img:1 --chown=1 /a /b/\n"))
	f.Add([]byte("FROM a AS b\nFROM c\nRUN --mount=type=cache,target=/c --mount=from=b,source=/s,target=/t --network=none x\n"))
	f.Add([]byte("FROM a\nRUN <<EOF\nx\nEOF\nCOPY <<-'A' <<B /d/\n\ta\n\tA\nb\nB\nRUN cat <<X | sh\ny\nX\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("Parse: %v is not invalid-argument", err)
			}
			return
		}
		if len(p.Stages) == 0 {
			t.Fatal("a plan with no FROM")
		}
		var steps []Step
		for _, st := range p.Stages {
			steps = append(steps, st.Steps...)
		}
		for _, s := range steps {
			if s.CopyFrom != "" && (s.FromStage >= len(p.Stages) || s.Op != OpCopy) {
				t.Fatalf("a --from of no earlier stage: %+v", s)
			}
			for _, m := range s.Mounts {
				if s.Op != OpRun || m.FromStage >= len(p.Stages) || (m.Type != MountSecret && m.Target == "") {
					t.Fatalf("a bad mount kept: %+v in %+v", m, s)
				}
			}
			if s.Op == OpRun && s.Shell == "" && len(s.Exec) == 0 && !(s.Script && len(s.Heredocs) == 1) {
				t.Fatalf("a RUN of nothing: %+v", s)
			}
			if (s.Op == OpCopy || s.Op == OpAdd) && (len(s.Sources) == 0 || s.Dest == "") {
				t.Fatalf("a copy without sources or destination: %+v", s)
			}
			for _, kv := range s.KVs {
				if s.Op != OpLabel && checkName(kv.Key) != nil {
					t.Fatalf("a bad name kept: %+v", kv)
				}
			}
		}
	})
}

func FuzzExpand(f *testing.F) {
	f.Add("${A:-x}$B\\$C")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := expand(s, map[string]string{"A": "a", "B": "b"})
		if err == nil && !strings.ContainsAny(s, `$\`) && got != s {
			t.Fatalf("expand(%q) = %q: a string with no $ changed", s, got)
		}
	})
}
