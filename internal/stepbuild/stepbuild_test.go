package stepbuild

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"maps"
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
	if p.From != "debian:${TAG}" || len(p.PreArgs) != 1 || p.PreArgs[0] != (KV{"TAG", "12", true}) {
		t.Errorf("from %q, pre-args %+v", p.From, p.PreArgs)
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
	for _, s := range p.Steps {
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

func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ dockerfile, says string }{
		{"", "has no FROM"},
		{"RUN true\nFROM x", "line 1: RUN: comes before FROM"},
		{"FROM a\nFROM b", "line 2: FROM: a second stage: multi-stage builds need the docker driver"},
		{"FROM --platform=linux/arm64 a", "line 1: FROM: \"--platform=linux/arm64\" is not taken here"},
		{"FROM a b", "want FROM image [AS name]"},
		{"FROM a\nRUN --mount=type=cache,target=/x true", "line 2: RUN: \"--mount=type=cache,target=/x\" is not taken here"},
		{"FROM a\nCOPY --from=b /x /y", "line 2: COPY: \"--from=b\" is not taken here (only --chown)"},
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
}

type fakeRun struct {
	argv      []string
	env       map[string]string
	cwd, user string
}

func (f *fakeBox) Run(_ context.Context, argv []string, env map[string]string, cwd, user string, out func([]byte)) (int, error) {
	f.runs = append(f.runs, fakeRun{argv, env, cwd, user})
	out([]byte("out of " + argv[0] + "\n"))
	return f.exit, nil
}

func (f *fakeBox) Mkdir(_ context.Context, dir string) error {
	f.mkdirs = append(f.mkdirs, dir)
	return nil
}

func (f *fakeBox) Extract(_ context.Context, dir string, r io.Reader) error {
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
	res, err := Run(t.Context(), p, bctx, box, func(s string) { log = append(log, s) })
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
	if _, err := Run(t.Context(), p, bctx, box, nil); err != nil {
		t.Fatal(err)
	}
	if got := box.extracts["/w"]; !maps.Equal(got, map[string]string{"renamed.txt": "one"}) {
		t.Errorf("extracted into /w: %q", got)
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
		_, err = Run(t.Context(), p, bctx, &fakeBox{exit: tc.exit}, nil)
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%q: got %v, want invalid saying %q", tc.dockerfile, err, tc.says)
		}
	}
}

func TestFrom(t *testing.T) {
	t.Parallel()
	p, err := Parse([]byte("ARG REG=r.example\nARG TAG\nFROM $REG/img:${TAG:-1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if from, err := From(p); err != nil || from != "r.example/img:1" {
		t.Errorf("From: %q, %v", from, err)
	}
	if got := FromStep(p, "r.example/img:1"); got != "Step 1/1 : FROM r.example/img:1" {
		t.Errorf("FromStep: %q", got)
	}
	p, _ = Parse([]byte("ARG X\nFROM $X\n"))
	if _, err := From(p); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("an empty FROM: got %v, want invalid", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("FROM a\nRUN echo $X \\\n && true\nCOPY [\"a\", \"b\"]\nENV A=\"b c\" D=e\n"))
	f.Add([]byte("ARG T=1\nFROM x:$T AS y\nLABEL 'a b'=c\nADD --chown=1:2 a b c/\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("Parse: %v is not invalid-argument", err)
			}
			return
		}
		if p.From == "" {
			t.Fatal("a plan with no FROM")
		}
		for _, s := range p.Steps {
			if s.Op == OpRun && s.Shell == "" && len(s.Exec) == 0 {
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
