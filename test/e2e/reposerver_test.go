package e2e

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// A repository server for the clone tests, in a test internet (newInternet):
// the host's git clones from a sandbox's network, so a server on the host's
// loopback is out of its reach, as it should be. The test binary is run again
// inside the namespace with these variables set.
const (
	envRepoServer = "HOTCELL_E2E_REPO_SERVER"
	// envRepoHTTP is ADDR[,ADDR...]=DIR=LOG: smart HTTP (git http-backend)
	// for the repositories under DIR on each ADDR, each request's method,
	// host and path logged to LOG.
	envRepoHTTP = "HOTCELL_E2E_REPO_HTTP"
	// envRepoSilent is an ADDR that accepts connections and never answers.
	envRepoSilent = "HOTCELL_E2E_REPO_SILENT"
)

func init() {
	if os.Getenv(envRepoServer) != "1" {
		return
	}
	if spec := os.Getenv(envRepoHTTP); spec != "" {
		parts := strings.SplitN(spec, "=", 3)
		git, err := exec.LookPath("git")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		backend := &cgi.Handler{Path: git, Args: []string{"http-backend"}, InheritEnv: []string{"PATH"},
			Env: []string{"GIT_PROJECT_ROOT=" + parts[1], "GIT_HTTP_EXPORT_ALL=1"}}
		h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if f, err := os.OpenFile(parts[2], os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600); err == nil {
				fmt.Fprintf(f, "%s %s%s from %s\n", r.Method, r.Host, r.URL.Path, r.RemoteAddr)
				f.Close()
			}
			backend.ServeHTTP(w, r)
		})
		for _, addr := range strings.Split(parts[0], ",") {
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			go http.Serve(ln, h)
		}
	}
	if addr := os.Getenv(envRepoSilent); addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		go func() {
			var held []net.Conn
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				held = append(held, c)
			}
		}()
	}
	select {}
}

// repoServer is a server started by startRepoServer.
type repoServer struct {
	log string // requests to the HTTP server, one a line
}

// requests returns the lines of the HTTP server's request log.
func (s repoServer) requests(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(s.log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.FieldsFunc(string(b), func(r rune) bool { return r == '\n' })
}

// startRepoServer runs, in the test internet in, a git smart-HTTP server for
// the repositories under root on httpAddrs (when root is set) and a silent
// TCP server on silentAddr (when set); both stop when the test ends.
func startRepoServer(t *testing.T, in *internet, root string, httpAddrs []netip.AddrPort, silentAddr netip.AddrPort) repoServer {
	t.Helper()
	s := repoServer{log: t.TempDir() + "/requests.log"}
	env := append(os.Environ(), envRepoServer+"=1")
	var wait []netip.AddrPort
	if root != "" {
		var addrs []string
		for _, a := range httpAddrs {
			addrs = append(addrs, a.String())
		}
		env = append(env, envRepoHTTP+"="+strings.Join(addrs, ",")+"="+root+"="+s.log)
		wait = append(wait, httpAddrs...)
	}
	if silentAddr.IsValid() {
		env = append(env, envRepoSilent+"="+silentAddr.String())
		wait = append(wait, silentAddr)
	}
	cmd := exec.Command("ip", "netns", "exec", in.ns, os.Args[0])
	cmd.Env = env
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	// Wait until each listens, seen from inside the namespace: a connect
	// from the host would be a request the tests count.
	for _, a := range wait {
		deadline := time.Now().Add(10 * time.Second)
		for !listening(in, a) {
			if time.Now().After(deadline) {
				t.Fatalf("the repository server on %s did not come up", a)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return s
}

// listening reports whether something in in's namespace listens on a
// (ss reads the socket table; it connects to nothing).
func listening(in *internet, a netip.AddrPort) bool {
	out, err := exec.Command("ip", "netns", "exec", in.ns, "ss", "-Htln", "src", a.String()).Output()
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	return sc.Scan()
}
