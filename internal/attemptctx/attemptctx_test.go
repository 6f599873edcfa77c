package attemptctx

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

type ctxKeyTest struct{}

func TestAttemptContextKind(t *testing.T) {
	bg := context.WithValue(context.Background(), ctxKeyTest{}, "v")
	if ctx, cancel := New(bg); true {
		defer cancel()
		if _, ok := ctx.(*attemptCtx); !ok {
			t.Errorf("under a parent that is never done: %T, want *attemptCtx", ctx)
		}
		if ctx.Value(ctxKeyTest{}) != "v" {
			t.Error("the parent's value is lost")
		}
		if _, ok := ctx.Deadline(); ok {
			t.Error("a deadline from nowhere")
		}
	}
	parent, pcancel := context.WithCancel(context.Background())
	ctx, cancel := New(parent)
	defer cancel()
	if _, ok := ctx.(*attemptCtx); ok {
		t.Error("under a cancellable parent: *attemptCtx, which would not follow it")
	}
	pcancel()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the parent's cancellation did not reach the attempt")
	}
}

func TestAttemptContextCancel(t *testing.T) {
	ctx, cancel := New(context.Background())
	if ctx.Err() != nil {
		t.Fatalf("Err before cancel: %v", ctx.Err())
	}
	done := ctx.Done()
	select {
	case <-done:
		t.Fatal("done before cancel")
	default:
	}
	cancel()
	cancel() // idempotent
	<-done
	if !errors.Is(ctx.Err(), context.Canceled) || !errors.Is(context.Cause(ctx), context.Canceled) {
		t.Errorf("Err %v, Cause %v, want context.Canceled", ctx.Err(), context.Cause(ctx))
	}
	// Done asked for only after the cancellation.
	ctx2, cancel2 := New(context.Background())
	cancel2()
	select {
	case <-ctx2.Done():
	default:
		t.Error("Done of a cancelled context is open")
	}
}

func TestAttemptContextChildren(t *testing.T) {
	ctx, cancel := New(context.Background())
	ac := ctx.(*attemptCtx)

	// A child cancelled first unregisters itself, as net/http's
	// per-request context does once the response is read.
	child, ccancel := context.WithCancelCause(ctx)
	ccancel(nil)
	if ac.first.id != 0 || ac.more != nil && len(*ac.more) != 0 {
		t.Errorf("a cancelled child is still registered: %+v %v", ac.first, ac.more)
	}

	// Live children, a grandchild and an AfterFunc end with the parent.
	c1, cancel1 := context.WithCancel(ctx)
	defer cancel1()
	c2, cancel2 := context.WithTimeout(ctx, time.Hour)
	defer cancel2()
	c3, cancel3 := context.WithCancel(c2)
	defer cancel3()
	ran := make(chan struct{})
	stopped := make(chan struct{})
	context.AfterFunc(ctx, func() { close(ran) })
	stop := context.AfterFunc(ctx, func() { close(stopped) })
	if !stop() {
		t.Error("stop before the cancellation reported false")
	}
	cancel()
	for i, c := range []context.Context{c1, c2, c3} {
		select {
		case <-c.Done():
		default:
			t.Errorf("child %d not cancelled with its parent", i+1)
		}
		if !errors.Is(c.Err(), context.Canceled) {
			t.Errorf("child %d: Err %v, want context.Canceled", i+1, c.Err())
		}
	}
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("AfterFunc did not run")
	}
	select {
	case <-stopped:
		t.Error("a stopped AfterFunc ran")
	default:
	}
	if child.Err() == nil {
		t.Error("the first child came back to life")
	}

	// A child of a cancelled context is cancelled at once.
	late, lcancel := context.WithCancel(ctx)
	defer lcancel()
	if late.Err() == nil {
		t.Error("a child made after the cancellation is alive")
	}
}

// TestAttemptContextRace cancels while children are being derived and
// cancelled on other goroutines: every child ends cancelled (run with
// -race).
func TestAttemptContextRace(t *testing.T) {
	for range 200 {
		ctx, cancel := New(context.Background())
		var wg sync.WaitGroup
		children := make([]context.Context, 8)
		cancels := make([]context.CancelFunc, 8)
		for i := range children {
			wg.Add(1)
			go func() {
				defer wg.Done()
				children[i], cancels[i] = context.WithCancel(ctx)
				if i%2 == 0 {
					cancels[i]()
				}
			}()
		}
		wg.Add(1)
		go func() { defer wg.Done(); cancel() }()
		wg.Wait()
		for i, c := range children {
			select {
			case <-c.Done():
			case <-time.After(10 * time.Second):
				t.Fatalf("child %d outlived its cancelled parent", i)
			}
			cancels[i]()
		}
	}
}

var attemptCtxSink context.Context

// BenchmarkAttemptContext compares the attempt's context with
// context.WithCancel under context.Background: created and cancelled
// (in-process), and with a child derived and cancelled before it, which is
// what net/http's Transport does with every request's context.
func BenchmarkAttemptContext(b *testing.B) {
	bg := context.Background()
	net := func(ctx context.Context) {
		child, cancel := context.WithCancelCause(ctx)
		select {
		case <-child.Done():
		default:
		}
		cancel(nil)
	}
	for _, bc := range []struct {
		name string
		mk   func(context.Context) (context.Context, context.CancelFunc)
	}{{"WithCancel", context.WithCancel}, {"attempt", New}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ctx, cancel := bc.mk(bg)
				attemptCtxSink = ctx
				cancel()
			}
		})
		b.Run(bc.name+"-child", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				ctx, cancel := bc.mk(bg)
				net(ctx)
				cancel()
			}
		})
	}
}
