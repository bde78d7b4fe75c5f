package k8se2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/hotcell/hotcell/client"
	"github.com/hotcell/hotcell/internal/testenv"
)

// TestKubernetesTemplateBuild: on Kubernetes, with a registry, a template
// is built from a Dockerfile as on Docker. A sandbox of the FROM image
// runs the steps through its agent (RUN, COPY and ADD of the context's
// files, ENV, ARG, WORKDIR, USER, LABEL), the build log comes back line
// by line, the root filesystem goes to the registry, and the build's
// sandbox is gone after. A sandbox from the template has what the steps
// made, and the image's env. A failing RUN fails the build with its line
// and output, and records no version.
func TestKubernetesTemplateBuild(t *testing.T) {
	d := startKubeDaemonWithRegistry(t, "--template-build-limits", "cpus=0.25,memory=256")
	env := d.k8s
	ctx, c := t.Context(), d.C
	image := testenv.BusyboxImage(t)

	dockerfile := `# syntax=docker/dockerfile:1
ARG BASE=` + image + `
FROM ${BASE}
ARG GREETING=hello
ENV APP_HOME=/opt/app \
    SPACED="two words"
LABEL team=ml
WORKDIR $APP_HOME
COPY app/ ./
COPY --chown=nobody notes.txt /etc/notes.txt
ADD bundle.tar.gz /opt/bundle/
RUN echo "$GREETING from $(pwd)" > built.txt && test -x main.sh && echo step-output-seen
USER nobody
RUN id -un > /tmp/whoami
USER root
RUN --mount=type=cache,target=/var/cache/app --mount=type=bind,source=notes.txt,target=/mnt/notes \
    echo cached > /var/cache/app/x && echo "mounted: $(cat /mnt/notes)"
RUN <<EOF
echo heredoc-ran > /etc/heredoc
EOF
COPY <<EOF /etc/from-heredoc
greeting $GREETING
EOF
CMD ["sleep", "1"]
`
	bundle := tarGz(t, map[string]string{"inside/bundled.txt": "from the archive\n"})
	bctx := contextTar(t, map[string]string{
		"Dockerfile":       dockerfile,
		"app/main.sh":      "#!/bin/sh\necho main\n",
		"app/lib/util.sh":  "util\n",
		"app/secret.key":   "left out by .dockerignore\n",
		"notes.txt":        "notes\n",
		"bundle.tar.gz":    string(bundle),
		".dockerignore":    "app/*.key\n",
		"not-copied/x.txt": "x\n",
	})
	var log []string
	tpl, err := c.BuildTemplate(ctx, "k8s-built", client.BuildTemplateOptions{}, bctx, func(line string) { log = append(log, line) })
	if err != nil {
		t.Fatalf("build: %v\nlog:\n%s\n%s", err, strings.Join(log, "\n"), d.Logs())
	}
	joined := strings.Join(log, "\n")
	for _, want := range []string{"Step 1/16 : FROM " + image, "Step 9/16 : RUN echo", "step-output-seen", "not used here", "mounted: notes"} {
		if !strings.Contains(joined, want) {
			t.Errorf("the build log lacks %q:\n%s", want, joined)
		}
	}
	if !registryHas(t, env, tpl.Image) {
		t.Errorf("the template's image %s is not in the registry", tpl.Image)
	}
	// The build's sandbox is gone.
	list, err := c.ListSandboxes(ctx, client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Errorf("sandboxes left after the build: %+v", list)
	}

	sb, err := c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: tpl.Name})
	if err != nil {
		t.Fatalf("create from the built template: %v\n%s", err, d.Logs())
	}
	got := execOK(t, c, sb.ID, `cd /opt/app && cat built.txt && ./main.sh && cat lib/util.sh /etc/notes.txt /opt/bundle/inside/bundled.txt /tmp/whoami && `+
		`stat -c %U /etc/notes.txt && echo "$APP_HOME|$SPACED|$GREETING" && ls /opt/app && ls -A /var/cache/app && test ! -e /mnt/notes && echo mounts-gone && cat /etc/heredoc /etc/from-heredoc`)
	// The RUN's mounts are not in the image: its cache directory is
	// empty, the bind mount's file gone.
	want := "hello from /opt/app\nmain\nutil\nnotes\nfrom the archive\nnobody\nnobody\n/opt/app|two words|\nbuilt.txt\nlib\nmain.sh\nmounts-gone\nheredoc-ran\ngreeting hello\n"
	if got != want {
		t.Errorf("the sandbox from the built template:\n got %q\nwant %q", got, want)
	}

	// A RUN that fails fails the build, naming its line, with its output.
	log = nil
	_, err = c.BuildTemplate(ctx, "k8s-built", client.BuildTemplateOptions{}, dockerContext(t, "FROM "+image+"\nRUN echo before\nRUN echo failing-output && exit 3\n"), func(line string) { log = append(log, line) })
	var apiErr *client.APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || !strings.Contains(apiErr.Message, "line 3") || !strings.Contains(apiErr.Message, "non-zero code: 3") {
		t.Errorf("a failing RUN: got %v, want 400 naming line 3 and its code", err)
	}
	if !strings.Contains(strings.Join(log, "\n"), "failing-output") {
		t.Errorf("the failing build's log lacks the step's output:\n%s", strings.Join(log, "\n"))
	}
	if got, err := c.GetTemplate(ctx, "k8s-built"); err != nil || got.Version != tpl.Version {
		t.Errorf("after the failed build: %+v, %v; want version %d kept", got, err, tpl.Version)
	}
	// What the builder cannot do as Docker's does is refused up front.
	_, err = c.BuildTemplate(ctx, "k8s-refused", client.BuildTemplateOptions{}, dockerContext(t, "FROM "+image+"\nRUN --mount=type=ssh true\n"), nil)
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusBadRequest || !strings.Contains(apiErr.Message, "line 2: RUN: \"--mount=type=ssh\": ssh mounts are not taken here") {
		t.Errorf("a RUN --mount=type=ssh: got %v, want 400 naming it", err)
	}
	if list, _ := c.ListSandboxes(ctx, client.ListOptions{}); len(list) != 1 {
		t.Errorf("sandboxes after the failed builds: %+v, want the one from the template", list)
	}
	if err := c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}

	// A multi-stage build: base is built on twice (so saved as an image
	// of its own) and copied from; build is copied from; tools' box goes
	// on as tools2's; unused is not needed, so not run; and a COPY
	// --from an image starts a box of it.
	dockerfile = `ARG BASE=` + image + `
FROM ${BASE} AS base
ENV FROM_BASE=yes
WORKDIR /w
RUN echo base > /base.txt && mkdir -p /out/sub && echo lib > /out/sub/lib.txt && ln -s sub/lib.txt /out/link && ln -s /base.txt /out/abs
FROM base AS build
RUN echo built > /out/app && chmod 755 /out/app && echo a > /out/a.txt && echo b > /out/b.txt
FROM ${BASE} AS unused
RUN echo unused-stage-ran && exit 7
FROM base AS tools
RUN echo tool > /tool.txt
FROM tools AS tools2
RUN echo tool2 >> /tool.txt
FROM base
COPY --from=build /out/app /usr/local/bin/app
COPY --from=build /out/ /opt/out/
COPY --from=0 /base.txt copied.txt
COPY --from=tools2 /tool.txt /tool.txt
COPY --from=build /out/*.txt /opt/txt/
COPY --from=` + image + ` /bin/busybox /opt/bb
`
	log = nil
	multi, err := c.BuildTemplate(ctx, "k8s-multi", client.BuildTemplateOptions{}, dockerContext(t, dockerfile), func(line string) { log = append(log, line) })
	if err != nil {
		t.Fatalf("multi-stage build: %v\nlog:\n%s\n%s", err, strings.Join(log, "\n"), d.Logs())
	}
	joined = strings.Join(log, "\n")
	for _, want := range []string{"Step 1/17 : FROM " + image + " AS base", "Step 11/17 : FROM base", "Step 17/17 : COPY --from=" + image, "saving stage 0", "going on in the box of stage tools"} {
		if !strings.Contains(joined, want) {
			t.Errorf("the multi-stage build's log lacks %q:\n%s", want, joined)
		}
	}
	if strings.Contains(joined, "unused-stage-ran") {
		t.Errorf("a stage the last one does not need ran:\n%s", joined)
	}
	if registryHas(t, env, multi.Image+"-stage1") {
		t.Errorf("the saved stage's image %s-stage1 is left in the registry", multi.Image)
	}
	if list, _ := c.ListSandboxes(ctx, client.ListOptions{}); len(list) != 0 {
		t.Errorf("sandboxes left after the multi-stage build: %+v", list)
	}
	sb, err = c.CreateSandbox(ctx, client.CreateSandboxRequest{Template: multi.Name})
	if err != nil {
		t.Fatalf("create from the multi-stage template: %v\n%s", err, d.Logs())
	}
	got = execOK(t, c, sb.ID, `app=/usr/local/bin/app; test -x $app && cat $app /opt/out/app /opt/out/sub/lib.txt /w/copied.txt /base.txt /tool.txt && `+
		`readlink /opt/out/link && cat /opt/out/link && readlink /opt/out/abs && ls /opt/txt && test -x /opt/bb && cmp /opt/bb /bin/busybox && echo "$FROM_BASE" && stat -c %U $app`)
	want = "built\nbuilt\nlib\nbase\nbase\ntool\ntool2\nsub/lib.txt\nlib\n/base.txt\na.txt\nb.txt\nyes\nroot\n"
	if got != want {
		t.Errorf("the sandbox from the multi-stage template:\n got %q\nwant %q", got, want)
	}
}

// contextTar is a build context of files (name to content).
func contextTar(t *testing.T, files map[string]string) *bytes.Reader {
	t.Helper()
	var buf bytes.Buffer
	writeTar(t, &buf, files)
	return bytes.NewReader(buf.Bytes())
}

func tarGz(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	writeTar(t, zw, files)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func writeTar(t *testing.T, w interface{ Write([]byte) (int, error) }, files map[string]string) {
	t.Helper()
	tw := tar.NewWriter(w)
	for name, body := range files {
		mode := int64(0o644)
		if strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: mode, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}
