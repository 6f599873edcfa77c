package tailcut

import (
	"context"
	"time"
)

// Per-request options carried in a context: the overrides of this file,
// the features (WithFeatures) and the chain mark (WithChainStop). The
// executor (Do) and the adapters read them; the policy's decisions never
// do.

type ctxKey struct{}

// requestOptions are per-request overrides carried in a context.
type requestOptions struct {
	noHedge bool
	delay   time.Duration // > 0: overrides the policy's delay
	feat    *Features     // WithFeatures (features.go)
	chained bool          // WithChainStop (chain.go)
}

// WithoutHedging returns a context under which [Do] sends the primary only.
// The request still counts in the policy's statistics.
func WithoutHedging(ctx context.Context) context.Context {
	o, _ := ctx.Value(ctxKey{}).(requestOptions)
	o.noHedge = true
	return context.WithValue(ctx, ctxKey{}, o)
}

// WithDelay returns a context under which [Do] uses d as the hedge delay of
// this request instead of the policy's. A d ≤ 0 is ignored.
func WithDelay(ctx context.Context, d time.Duration) context.Context {
	if d <= 0 {
		return ctx
	}
	o, _ := ctx.Value(ctxKey{}).(requestOptions)
	o.delay = d
	return context.WithValue(ctx, ctxKey{}, o)
}

// Overrides reports the per-request overrides that [WithoutHedging] and
// [WithDelay] put in ctx, for adapters that drive the [Policy] themselves
// instead of through [Do]: noHedge means send the primary only; a positive
// delay replaces the policy's delay for this request.
func Overrides(ctx context.Context) (noHedge bool, delay time.Duration) {
	o, _ := ctx.Value(ctxKey{}).(requestOptions)
	return o.noHedge, o.delay
}

// WithFeatures returns a context under which [Do] (and the hedgehttp and
// hedgegrpc adapters) begin the request with f: its labels are added after
// those the adapter derives. They are used only by a policy with
// Config.Predictive set. Calling it again replaces the features.
//
// WithFeatures allocates the context value; a caller that runs the policy
// itself passes features to [Policy.BeginWith] instead, without
// allocating.
func WithFeatures(ctx context.Context, f Features) context.Context {
	o, _ := ctx.Value(ctxKey{}).(requestOptions)
	o.feat = &f
	return context.WithValue(ctx, ctxKey{}, o)
}

// FeaturesFrom returns the features [WithFeatures] put in ctx, for adapters
// that drive the [Policy] themselves instead of through [Do].
func FeaturesFrom(ctx context.Context) (Features, bool) {
	o, _ := ctx.Value(ctxKey{}).(requestOptions)
	if o.feat == nil {
		return Features{}, false
	}
	return *o.feat, true
}
