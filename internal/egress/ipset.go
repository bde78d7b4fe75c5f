package egress

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// ipsetAPI is the part of ipset(8) the firewall uses; tests fake it. Sets
// keep address lists out of the rules: one rule matches a whole set, and
// adding an address is a set change, not a new rule.
type ipsetAPI interface {
	// Create makes set name of typ (e.g. "hash:net") unless it exists;
	// opts are ipset create options such as "maxelem", "1024".
	Create(name, typ string, opts ...string) error
	// Add and Del change members; adding a member already there or
	// deleting one not there is not an error. No members: nothing to do.
	Add(name string, members ...string) error
	Del(name string, members ...string) error
	// Replace makes name hold exactly members, atomically (a swap with a
	// set built aside).
	Replace(name, typ string, members []string, opts ...string) error
	// Destroy removes the set; a missing set is not an error.
	Destroy(name string) error
	// List returns the names of the sets.
	List() ([]string, error)
}

// ipsetCmd runs the ipset command (Debian package ipset).
type ipsetCmd struct{}

var _ ipsetAPI = ipsetCmd{}

func (ipsetCmd) run(stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "ipset", args...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		if errors.Is(err, exec.ErrNotFound) {
			return "", fmt.Errorf("ipset is not installed (Debian: apt-get install ipset): %w", err)
		}
		return "", fmt.Errorf("ipset %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

func (s ipsetCmd) Create(name, typ string, opts ...string) error {
	_, err := s.run("", append([]string{"-exist", "create", name, typ}, opts...)...)
	return err
}

func (s ipsetCmd) Add(name string, members ...string) error { return s.batch("add", name, members) }

func (s ipsetCmd) Del(name string, members ...string) error { return s.batch("del", name, members) }

// batch runs one ipset process for all members.
func (s ipsetCmd) batch(op, name string, members []string) error {
	switch len(members) {
	case 0:
		return nil
	case 1:
		_, err := s.run("", "-exist", op, name, members[0])
		return err
	}
	var b strings.Builder
	for _, m := range members {
		fmt.Fprintf(&b, "%s %s %s\n", op, name, m)
	}
	_, err := s.run(b.String(), "-exist", "restore")
	return err
}

func (s ipsetCmd) Replace(name, typ string, members []string, opts ...string) error {
	tmp := name + "-n"
	var b strings.Builder
	fmt.Fprintf(&b, "create %s %s %s\n", name, typ, strings.Join(opts, " "))
	fmt.Fprintf(&b, "create %s %s %s\n", tmp, typ, strings.Join(opts, " "))
	fmt.Fprintf(&b, "flush %s\n", tmp)
	for _, m := range members {
		fmt.Fprintf(&b, "add %s %s\n", tmp, m)
	}
	fmt.Fprintf(&b, "swap %s %s\ndestroy %s\n", tmp, name, tmp)
	if _, err := s.run(b.String(), "-exist", "restore"); err != nil {
		_ = s.Destroy(tmp)
		return err
	}
	return nil
}

func (s ipsetCmd) Destroy(name string) error {
	_, err := s.run("", "destroy", name)
	if err != nil && strings.Contains(err.Error(), "does not exist") {
		return nil
	}
	return err
}

func (s ipsetCmd) List() ([]string, error) {
	out, err := s.run("", "list", "-n")
	if err != nil {
		return nil, err
	}
	return strings.Fields(out), nil
}
