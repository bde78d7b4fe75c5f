package driver

import "context"

// StepTrace learns that a step of a lifecycle operation just ended (the
// manager times the steps between calls). A driver calls TraceStep after
// each part of Create, Start and Destroy that may take time on its own
// (the workspace disk, the container), so that where a create's time goes
// can be measured without the driver knowing about metrics.
type StepTrace func(step string)

type traceKey struct{}

// WithStepTrace returns ctx carrying t.
func WithStepTrace(ctx context.Context, t StepTrace) context.Context {
	return context.WithValue(ctx, traceKey{}, t)
}

// TraceStep tells ctx's StepTrace, if any, that step just ended.
func TraceStep(ctx context.Context, step string) {
	if t, ok := ctx.Value(traceKey{}).(StepTrace); ok && t != nil {
		t(step)
	}
}
