package sandbox

import (
	"fmt"
	"slices"

	"github.com/hotcell/hotcell/internal/errdefs"
	"github.com/hotcell/hotcell/internal/wire"
)

// Op is a lifecycle operation the state machine rules on.
type Op string

const (
	OpStart   Op = "start"
	OpStop    Op = "stop"
	OpPause   Op = "pause"
	OpResume  Op = "resume"
	OpDestroy Op = "destroy"
	// OpUse is any call that needs the sandbox's agent: exec, files, ...
	OpUse Op = "use"
)

// transition is one row of the state machine: from which states op is
// allowed, the state it leads to, and the states in which it is a no-op
// (asking for what already is succeeds without doing anything).
type transition struct {
	from []wire.State
	noop []wire.State
	to   wire.State
	// refusal completes "sandbox X is <state>; " when op is refused.
	refusal string
}

// transitions is the lifecycle state machine (DESIGN.md "Lifecycle"):
//
//	creating → running ⇄ paused;  running|paused|error → stopped → running;
//	any → destroyed;  error with a reason from anywhere.
//
// Every lifecycle method asks checkTransition before it acts, so this table
// is the one place that says what makes sense.
var transitions = map[Op]transition{
	OpStart: {
		from:    []wire.State{wire.StateStopped, wire.StateError},
		noop:    []wire.State{wire.StateRunning},
		to:      wire.StateRunning,
		refusal: "only a stopped sandbox can be started (resume a paused one)",
	},
	OpStop: {
		from:    []wire.State{wire.StateRunning, wire.StatePaused, wire.StateError},
		noop:    []wire.State{wire.StateStopped},
		to:      wire.StateStopped,
		refusal: "only a running, paused or failed sandbox can be stopped",
	},
	OpPause: {
		from:    []wire.State{wire.StateRunning},
		noop:    []wire.State{wire.StatePaused},
		to:      wire.StatePaused,
		refusal: "only a running sandbox can be paused",
	},
	OpResume: {
		from:    []wire.State{wire.StatePaused},
		noop:    []wire.State{wire.StateRunning},
		to:      wire.StateRunning,
		refusal: "only a paused sandbox can be resumed",
	},
	OpDestroy: {
		from: []wire.State{wire.StateCreating, wire.StateRunning, wire.StatePaused, wire.StateStopped, wire.StateError},
		noop: []wire.State{wire.StateDestroyed},
		to:   wire.StateDestroyed,
	},
	OpUse: {
		from:    []wire.State{wire.StateRunning},
		to:      wire.StateRunning,
		refusal: "it must be running",
	},
}

// hints tell the caller how to get out of a state when OpUse is refused.
var useHints = map[wire.State]string{
	wire.StatePaused:   "resume it first",
	wire.StateStopped:  "start it first",
	wire.StateError:    "start it again or destroy it",
	wire.StateCreating: "wait for the create to finish",
}

// checkTransition says whether op may run on sandbox id in state cur. noop
// is true when the sandbox already is where op leads; a refusal wraps
// errdefs.ErrConflict and names the current state.
func checkTransition(id string, cur wire.State, op Op) (noop bool, err error) {
	t, ok := transitions[op]
	if !ok {
		return false, fmt.Errorf("unknown lifecycle operation %q", op)
	}
	if slices.Contains(t.noop, cur) {
		return true, nil
	}
	if slices.Contains(t.from, cur) {
		return false, nil
	}
	msg := t.refusal
	if op == OpUse {
		if h, ok := useHints[cur]; ok {
			msg = h
		}
	}
	return false, fmt.Errorf("sandbox %s is %s; %s: %w", id, cur, msg, errdefs.ErrConflict)
}
