// Package attemptctx makes the context of one attempt of a hedged
// request: a cancellable context made cheaper where its parent can never
// be cancelled (New).
package attemptctx

import (
	"context"
	"sync"
	"sync/atomic"
)

// New returns the context of one attempt under parent, and
// the function that cancels it: what context.WithCancel(parent) returns,
// made cheaper when parent can never be cancelled (its Done is nil, as for
// context.Background, and values over it), which is where most client
// calls without a timeout begin.
//
// For such a parent, context.WithCancel spends most of its time in two
// atomic.Value stores when the context is cancelled, and a transport that
// derives its own context (net/http does, for every request) registers in
// a map it allocates. An attemptCtx is cancelled under a plain lock and
// keeps its children in a slice, which costs less both created and
// cancelled alone and with a child derived and cancelled first, as net/http
// does (BenchmarkAttemptContext compares the two). A parent that can be cancelled gets context.WithCancel:
// following it would need context.AfterFunc, which costs more than it saves.
func New(parent context.Context) (context.Context, context.CancelFunc) {
	if parent.Done() != nil {
		return context.WithCancel(parent)
	}
	c := &attemptCtx{Context: parent}
	return c, c.cancel
}

// attemptCtx is a cancellable context whose parent is never done. Deadline
// and Value are the parent's. Contexts derived from it (context.WithCancel,
// context.AfterFunc) register through its AfterFunc method, which the
// context package looks for on a parent of its own making.
//
// Every attempt in flight holds one (BenchmarkInflightMemory in bench):
// its fields fit in 64 bytes, the registrations past the first in a slice
// of their own.
type attemptCtx struct {
	context.Context // the parent

	mu       sync.Mutex
	canceled atomic.Bool
	nextID   uint32        // the last id given; a context sees a few registrations
	done     chan struct{} // made by the first Done; closed by cancel
	first    afterFunc     // the first registration (usually the only one)
	more     *[]afterFunc  // the others; nil while there are none
}

// afterFunc is one function registered with AfterFunc; id 0 is an empty slot.
type afterFunc struct {
	f  func()
	id uint32
}

// closedchan is the Done channel of an attemptCtx cancelled before anyone
// asked for it.
var closedchan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// Done returns a channel closed when the context is cancelled.
func (c *attemptCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		if c.canceled.Load() {
			c.done = closedchan
		} else {
			c.done = make(chan struct{})
		}
	}
	return c.done
}

// Err returns context.Canceled once the context is cancelled, else the
// parent's Err (nil for any parent whose Done is nil, as the standard
// ones).
func (c *attemptCtx) Err() error {
	if c.canceled.Load() {
		return context.Canceled
	}
	return c.Context.Err()
}

// AfterFunc arranges for f to run once the context is cancelled: at once,
// on the cancelling goroutine (the context package passes functions that
// cancel a child context), or on a goroutine of its own if the context is
// cancelled already. stop unregisters f, and reports whether it did so
// before f was started.
func (c *attemptCtx) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	if c.canceled.Load() {
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	c.nextID++
	id := c.nextID
	switch {
	case c.first.id == 0:
		c.first = afterFunc{f: f, id: id}
	case c.more == nil:
		c.more = &[]afterFunc{{f: f, id: id}}
	default:
		*c.more = append(*c.more, afterFunc{f: f, id: id})
	}
	c.mu.Unlock()
	return func() bool { return c.unregister(id) }
}

// unregister removes the function registered as id, and reports whether it
// was still there.
func (c *attemptCtx) unregister(id uint32) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.first.id == id {
		c.first = afterFunc{}
		return true
	}
	if c.more == nil {
		return false
	}
	for i, a := range *c.more {
		if a.id == id {
			*c.more = append((*c.more)[:i], (*c.more)[i+1:]...)
			return true
		}
	}
	return false
}

// cancel cancels the context: closes Done and runs the registered
// functions. Later calls do nothing.
func (c *attemptCtx) cancel() {
	c.mu.Lock()
	if c.canceled.Load() {
		c.mu.Unlock()
		return
	}
	c.canceled.Store(true)
	if c.done != nil {
		close(c.done)
	}
	first, more := c.first, c.more
	c.first, c.more = afterFunc{}, nil
	c.mu.Unlock()
	// Outside the lock: a child's cancel may call its stop, which takes it.
	if first.f != nil {
		first.f()
	}
	if more != nil {
		for _, a := range *more {
			a.f()
		}
	}
}

// String names the context as context.WithCancel's does.
func (c *attemptCtx) String() string {
	if s, ok := c.Context.(interface{ String() string }); ok {
		return s.String() + ".WithCancel"
	}
	return "tailcut.attemptContext"
}
