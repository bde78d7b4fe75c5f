// Package scripts tests the shell functions of scripts/lib.sh that change
// the host: here, registering gVisor's runsc with the Docker Engine.
package scripts

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hotcell/hotcell/internal/testenv"
)

// lib runs fn of scripts/lib.sh with args and the extra env and returns
// its stdout, its stderr and whether it succeeded.
func lib(t *testing.T, env []string, fn string, args ...string) (stdout, stderr string, ok bool) {
	t.Helper()
	testenv.RequireTool(t, "bash")
	testenv.RequireTool(t, "jq")
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", append([]string{"-c", `. "$0"; "$@"`, filepath.Join(root, "scripts", "lib.sh"), fn}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var o, e strings.Builder
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err == nil
}

const ours = `["--platform=ptrace","--network=host","--host-uds=open"]`

// TestRunscRegister merges the runsc runtime into daemon.json files: other
// settings, other runtimes and the entry's own flags stay; a file that has
// it already is left byte for byte; a file that is not a JSON object is an
// error and left as it was.
func TestRunscRegister(t *testing.T) {
	t.Parallel()
	registered := `{"runtimes":{"runsc":{"path":"/usr/bin/runsc","runtimeArgs":` + ours + `}}}`
	for _, tc := range []struct {
		name, before string // before "-": no file
		want, result string
	}{
		{"no file", "-", registered, "changed"},
		{"empty file", "", registered, "changed"},
		{"other settings", `{"log-driver":"json-file","default-runtime":"runc","runtimes":{"kata":{"path":"/usr/bin/kata"}}}`,
			`{"log-driver":"json-file","default-runtime":"runc","runtimes":{"kata":{"path":"/usr/bin/kata"},"runsc":{"path":"/usr/bin/runsc","runtimeArgs":` + ours + `}}}`, "changed"},
		{"an entry of the operator's", `{"runtimes":{"runsc":{"path":"/opt/runsc","runtimeArgs":["--debug","--platform=kvm","--network","sandbox","-host-uds=all","--strace"]}}}`,
			`{"runtimes":{"runsc":{"path":"/opt/runsc","runtimeArgs":["--debug","--strace","--platform=ptrace","--network=host","--host-uds=open"]}}}`, "changed"},
		{"registered, other layout", "{\n  \"runtimes\": {\"runsc\": {\"runtimeArgs\": " + ours + ", \"path\": \"/usr/bin/runsc\"}}\n}\n", "", "unchanged"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			file := filepath.Join(t.TempDir(), "docker", "daemon.json")
			if tc.before != "-" {
				if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, []byte(tc.before), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			out, errOut, ok := lib(t, nil, "runsc_register", file, "runsc", "/usr/bin/runsc")
			if !ok || strings.TrimSpace(out) != tc.result {
				t.Fatalf("runsc_register: got %q, ok=%v (%s); want %s", out, ok, errOut, tc.result)
			}
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if tc.result == "unchanged" {
				if string(data) != tc.before {
					t.Errorf("an unchanged file was rewritten: %q, was %q", data, tc.before)
				}
				if _, err := os.Stat(file + ".hotcell-backup"); err == nil {
					t.Errorf("an unchanged file got a backup")
				}
				return
			}
			var got, want any
			if err := json.Unmarshal(data, &got); err != nil {
				t.Fatalf("the merged file is not JSON: %v\n%s", err, data)
			}
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("merged file (-want +got):\n%s", d)
			}
			if tc.before != "-" {
				if fi, err := os.Stat(file); err != nil || fi.Mode().Perm() != 0o600 {
					t.Errorf("merged file's mode: got %v, %v; want the old file's 0600", fi.Mode().Perm(), err)
				}
				if b, err := os.ReadFile(file + ".hotcell-backup"); err != nil || string(b) != tc.before {
					t.Errorf("backup: got %q, %v; want the old file", b, err)
				}
			}
			// Merging again changes nothing.
			if out, _, ok := lib(t, nil, "runsc_register", file, "runsc", "/usr/bin/runsc"); !ok || strings.TrimSpace(out) != "unchanged" {
				t.Errorf("second runsc_register: got %q, ok=%v; want unchanged", out, ok)
			}
		})
	}
	// hotcell's build of runsc replaces the runsc hotcell registered before
	// (Debian's, or an older build), flags and path; an operator's path stays.
	built := `["--platform=systrap","--network=host","--host-uds=open","--overlay2=none"]`
	const buildPath = "/usr/local/lib/hotcell/gvisor/v2/runsc"
	for _, tc := range []struct{ name, before, want string }{
		{"Debian's becomes the build", registered,
			`{"runtimes":{"runsc":{"path":"` + buildPath + `","runtimeArgs":` + built + `}}}`},
		{"an older build becomes the build", `{"runtimes":{"runsc":{"path":"/usr/local/lib/hotcell/gvisor/v1/runsc","runtimeArgs":["--debug","--overlay2","root:self","--platform=systrap"]}}}`,
			`{"runtimes":{"runsc":{"path":"` + buildPath + `","runtimeArgs":["--debug","--platform=systrap","--network=host","--host-uds=open","--overlay2=none"]}}}`},
		{"an operator's path stays", `{"runtimes":{"runsc":{"path":"/opt/runsc","runtimeArgs":` + ours + `}}}`,
			`{"runtimes":{"runsc":{"path":"/opt/runsc","runtimeArgs":` + built + `}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			file := filepath.Join(t.TempDir(), "daemon.json")
			if err := os.WriteFile(file, []byte(tc.before), 0o644); err != nil {
				t.Fatal(err)
			}
			env := []string{"HOTCELL_GVISOR_DIR=/usr/local/lib/hotcell/gvisor"}
			if out, errOut, ok := lib(t, env, "runsc_register", file, "runsc", buildPath, built); !ok || strings.TrimSpace(out) != "changed" {
				t.Fatalf("runsc_register: got %q, ok=%v (%s); want changed", out, ok, errOut)
			}
			data, _ := os.ReadFile(file)
			var got, want any
			if err := json.Unmarshal(data, &got); err != nil {
				t.Fatalf("the merged file is not JSON: %v\n%s", err, data)
			}
			if err := json.Unmarshal([]byte(tc.want), &want); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("merged file (-want +got):\n%s", d)
			}
			if out, _, ok := lib(t, env, "runsc_register", file, "runsc", buildPath, built); !ok || strings.TrimSpace(out) != "unchanged" {
				t.Errorf("second runsc_register: got %q, ok=%v; want unchanged", out, ok)
			}
		})
	}
	t.Run("not an object", func(t *testing.T) {
		t.Parallel()
		file := filepath.Join(t.TempDir(), "daemon.json")
		for _, before := range []string{`["runtimes"]`, `{"runtimes":`} {
			if err := os.WriteFile(file, []byte(before), 0o644); err != nil {
				t.Fatal(err)
			}
			if out, _, ok := lib(t, nil, "runsc_register", file, "runsc", "/usr/bin/runsc"); ok {
				t.Errorf("runsc_register of %q: got %q and success, want an error", before, out)
			}
			if b, _ := os.ReadFile(file); string(b) != before {
				t.Errorf("runsc_register of %q rewrote it: %q", before, b)
			}
		}
	})
}

// TestEnsureRunscRegistered runs ensure_runsc on this host, whose engine
// has runsc registered already (scripts/test registers it before the
// tests): the engine's config file stays as it was and dockerd gets no
// SIGHUP.
func TestEnsureRunscRegistered(t *testing.T) {
	testenv.RequireRoot(t, "ensure_runsc reads and may write the engine's daemon.json")
	testenv.RequireDocker(t)
	const file = "/etc/docker/daemon.json"
	before, err := os.ReadFile(file)
	if err != nil {
		testenv.SkipOrFail(t, "no %s: scripts/test registers runsc there: %v", file, err)
	}
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	// Only a file that needs nothing is left to ensure_runsc: this test
	// must not change the host.
	cp := filepath.Join(t.TempDir(), "daemon.json")
	if err := os.WriteFile(cp, before, 0o600); err != nil {
		t.Fatal(err)
	}
	// What ensure_runsc would register: hotcell's build of runsc (which it
	// builds first when it is missing), or Debian's when the build fails.
	if _, _, ok := lib(t, nil, "eval", `test -x "$GVISOR_DIR/$GVISOR_VERSION/runsc"`); !ok {
		testenv.SkipOrFail(t, "hotcell's build of runsc is not installed; run scripts/test")
	}
	if out, _, _ := lib(t, []string{"HC_DAEMON_JSON=" + cp}, "eval", `read -r p a < <(runsc_pick) && runsc_register "$HC_DAEMON_JSON" runsc "$p" "$a"`); strings.TrimSpace(out) != "unchanged" {
		testenv.SkipOrFail(t, "%s does not have runsc registered as scripts/lib.sh does (runsc_register said %q); run scripts/test", file, out)
	}
	out, errOut, ok := lib(t, nil, "ensure_runsc")
	if !ok {
		t.Fatalf("ensure_runsc: failed: %s%s", out, errOut)
	}
	if strings.Contains(errOut, "SIGHUP") {
		t.Errorf("ensure_runsc reloaded dockerd for a file that had runsc: %s", errOut)
	}
	after, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	fi2, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) || !fi2.ModTime().Equal(fi.ModTime()) {
		t.Errorf("ensure_runsc rewrote %s, which had runsc registered", file)
	}
}
