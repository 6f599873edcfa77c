package proxy

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Defaults of a listener's stall bounds (see [Listener]).
const (
	DefaultBodyTimeout  = 30 * time.Second
	DefaultWriteTimeout = 30 * time.Second
	// DefaultMinProgress is the bytes a client must move per
	// body_timeout or write_timeout waited on it.
	DefaultMinProgress = 4 << 10
	// headerTimeout bounds the reading of a request's head, idleTimeout
	// a keep-alive connection's wait for its next request.
	headerTimeout = 10 * time.Second
	idleTimeout   = 2 * time.Minute
)

// errBodyStalled is the error a request body's read returns when the
// client sent less than min_progress of it per body_timeout waited. It
// wraps os.ErrDeadlineExceeded, so that middleware reading the body
// (hedgehttp.Idempotent) answers 408 too.
var errBodyStalled = fmt.Errorf("request body stalled past the listener's body_timeout: %w", os.ErrDeadlineExceeded)

// front is the first handler of a traffic listener, in front of its
// max_in_flight bound: it bounds how long a request may wait on its client
// (the next bytes of its body, the client taking the next bytes of the
// answer), so that stalled clients release the bound's slots, and closes
// the connection after a request whose framing was ambiguous.
type front struct {
	next        http.Handler
	body, write time.Duration // zero: no bound
	min         int64         // bytes a client must move per bound waited
	idle        time.Duration // an upgraded connection's idle bound
	cut         *cutoffs
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if fc, ok := r.Context().Value(framingKey{}).(*framingConn); ok && fc.ambiguous(r) {
		// RFC 9112 §6.1 and §6.3: a request with both Transfer-Encoding
		// and Content-Length, or HTTP/1.0 with Transfer-Encoding, may be
		// framed differently by a front end; the server must close the
		// connection after answering it, so that no bytes after it are
		// read as another request.
		w.Header().Set("Connection", "close")
		f.cut.framing.Add(1)
	}
	rc := http.NewResponseController(w)
	// A write deadline left by the connection's previous request must not
	// cut this one (a long poll, an upgraded connection).
	_ = rc.SetWriteDeadline(time.Time{})
	if f.body > 0 && r.Body != nil && r.Body != http.NoBody {
		sb := &stallBody{ReadCloser: r.Body, rc: rc, progress: progress{d: f.body, min: f.min}, cut: &f.cut.body}
		// The deadline is set at once: a handler that never reads the
		// body (a 404, a 503) leaves net/http to discard it after the
		// answer, and that must not wait on the client either.
		sb.arm(time.Now())
		// A copy (the server keeps its own Body), whose context says
		// where to look for a stall: the read error that tells it also
		// cancels the request, so the error a handler sees may be
		// context.Canceled.
		r = r.WithContext(context.WithValue(r.Context(), stallKey{}, sb))
		r.Body = sb
	}
	if f.write > 0 {
		sw := &stallWriter{ResponseWriter: w, rc: rc, progress: progress{d: f.write, min: f.min}, idle: f.idle, cut: &f.cut.write}
		w = sw
		// The server flushes what is still buffered after the handler
		// returns: give that its own window, from then.
		defer func() { sw.arm(time.Now(), true) }()
	}
	f.next.ServeHTTP(w, r)
}

// progress bounds how long a request's operations (reads of its body,
// writes of its answer) wait on the client: the client must move min
// bytes (or the rest of the body) for every d the proxy spends waiting
// on it. Only the time inside operations counts: while the handler or
// the upstream is busy the client is not waited on. The deadline is
// moved only when an eighth of d would be gained, so that most
// operations cost two clock reads and no timer change: the client gets
// between 7/8 of d and d per min bytes.
type progress struct {
	d      time.Duration
	min    int64
	waited time.Duration // waited on the client since the last reset
	moved  int64         // bytes moved since the last reset
	until  time.Time     // the deadline set
}

// start returns the deadline to set before an operation starting at
// now, or the zero time and false if the one set is close enough. A
// reset (min bytes moved, or force) gives the client a fresh d.
func (p *progress) start(now time.Time, force bool) (time.Time, bool) {
	if force || p.moved >= p.min {
		p.waited, p.moved = 0, 0
	}
	t := now.Add(p.d - p.waited)
	if !force && t.Sub(p.until) <= p.d/8 {
		return time.Time{}, false
	}
	p.until = t
	return t, true
}

// took notes an operation that started at start, ended at now and moved
// n bytes.
func (p *progress) took(start, now time.Time, n int) {
	p.waited += now.Sub(start)
	p.moved += int64(n)
}

// stallBody is a request body whose reads wait at most body_timeout for
// the client. Once the body is read to its end the connection's read
// deadline is cleared: net/http reads ahead on it while the handler runs
// (to notice a client gone), and a deadline firing then would cancel the
// request. After a stall the deadline stays past, so that the server
// does not wait for the rest of the body either: it closes the
// connection.
type stallBody struct {
	io.ReadCloser
	rc *http.ResponseController
	progress
	done    bool
	stalled atomic.Bool
	cut     *atomic.Int64
}

// arm sets the read deadline for a read starting at now.
func (b *stallBody) arm(now time.Time) {
	if t, ok := b.start(now, false); ok {
		_ = b.rc.SetReadDeadline(t)
	}
}

// stallKey is the context key of a request's stallBody.
type stallKey struct{}

// bodyStalled reports whether r's body stalled past its listener's
// body_timeout.
func bodyStalled(r *http.Request) bool {
	sb, ok := r.Context().Value(stallKey{}).(*stallBody)
	return ok && sb.stalled.Load()
}

func (b *stallBody) Read(p []byte) (int, error) {
	if b.done {
		return b.ReadCloser.Read(p)
	}
	start := time.Now()
	b.arm(start)
	n, err := b.ReadCloser.Read(p)
	b.took(start, time.Now(), n)
	switch {
	case err == nil:
	case errors.Is(err, os.ErrDeadlineExceeded):
		b.done = true
		b.stalled.Store(true)
		b.cut.Add(1)
		err = errBodyStalled
	default:
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// stallWriter is a ResponseWriter whose writes wait at most write_timeout
// for the client to take bytes.
type stallWriter struct {
	http.ResponseWriter
	rc *http.ResponseController
	progress
	idle    time.Duration // an upgraded connection's idle bound
	stalled bool
	cut     *atomic.Int64
}

func (w *stallWriter) arm(now time.Time, force bool) {
	if t, ok := w.start(now, force); ok {
		_ = w.rc.SetWriteDeadline(t)
	}
}

// check counts the first write that failed on the deadline.
func (w *stallWriter) check(err error) error {
	if err != nil && !w.stalled && errors.Is(err, os.ErrDeadlineExceeded) {
		w.stalled = true
		w.cut.Add(1)
	}
	return err
}

func (w *stallWriter) Write(p []byte) (int, error) {
	start := time.Now()
	w.arm(start, false)
	n, err := w.ResponseWriter.Write(p)
	w.took(start, time.Now(), n)
	return n, w.check(err)
}

// Flush flushes, as http.Flusher.
func (w *stallWriter) Flush() { _ = w.FlushError() }

// FlushError flushes, as http.ResponseController does.
func (w *stallWriter) FlushError() error {
	start := time.Now()
	w.arm(start, false)
	err := w.rc.Flush()
	w.took(start, time.Now(), 0)
	return w.check(err)
}

// Unwrap returns the server's ResponseWriter (for
// http.ResponseController: Hijack, deadlines).
func (w *stallWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Hijack hands over the connection of an upgraded request (a WebSocket
// relayed by httputil.ReverseProxy), which holds its max_in_flight slot
// until the tunnel closes: the connection returned closes the tunnel
// after idle with no read or write started either way.
func (w *stallWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := w.rc.Hijack()
	if err != nil || w.idle <= 0 {
		return c, brw, err
	}
	ic := &idleConn{Conn: c, d: w.idle}
	ic.push()
	return ic, brw, nil
}

// idleConn is a hijacked connection whose deadline (both ways) is pushed
// d past each read or write, when an eighth of d stale.
type idleConn struct {
	net.Conn
	d     time.Duration
	mu    sync.Mutex
	until time.Time
}

func (c *idleConn) push() {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.until.Sub(now) > c.d-c.d/8 {
		return
	}
	c.until = now.Add(c.d)
	_ = c.Conn.SetDeadline(c.until)
}

func (c *idleConn) Read(p []byte) (int, error) {
	c.push()
	return c.Conn.Read(p)
}

func (c *idleConn) Write(p []byte) (int, error) {
	c.push()
	return c.Conn.Write(p)
}

// framingListener hands out framingConns.
type framingListener struct{ net.Listener }

func (l framingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &framingConn{Conn: c, lineStart: true}, nil
}

// framingKey is the context key of a request's framingConn (set by the
// server's ConnContext).
type framingKey struct{}

// framingConn is a client connection that notes the framing headers its
// bytes carry: net/http drops a Content-Length sent with a
// Transfer-Encoding, and a Transfer-Encoding sent with HTTP/1.0, before a
// handler sees the request, so only the bytes tell a request whose framing
// is ambiguous.
//
// It marks every line that starts with "Transfer-Encoding:" or
// "Content-Length:" (in any case), wherever it is: a request's head is
// read before its handler runs, so the handler sees its marks (with those
// of bytes read since the previous request's handler started, a body
// line looking like a header among them; such a false mark costs a
// reconnection, never a request).
type framingConn struct {
	net.Conn
	marks atomic.Uint32 // markTE | markCL, taken by ambiguous
	// The scan's state, used by Read only (net/http never reads a
	// connection from two goroutines at once).
	lineStart bool
	name      [len("transfer-encoding:")]byte
	n         int // bytes of name matched so far; -1: not a framing line
}

const (
	markTE = 1 << iota
	markCL
)

var (
	teName = []byte("transfer-encoding:")
	clName = []byte("content-length:")
)

// CloseWrite shuts down the writing side of the connection, as
// *net.TCPConn's does: net/http calls it before closing a connection
// after an answer whose request it did not read to the end
// (closeWriteAndWait), so that the client reads the answer rather than a
// reset.
func (c *framingConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func (c *framingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.scan(p[:n])
	return n, err
}

// scan notes the framing header lines of b, the next bytes read.
func (c *framingConn) scan(b []byte) {
	for len(b) > 0 {
		if !c.lineStart && c.n < 0 {
			i := bytes.IndexByte(b, '\n')
			if i < 0 {
				return
			}
			b, c.lineStart, c.n = b[i+1:], true, 0
			continue
		}
		c.lineStart = false
		ch := b[0]
		b = b[1:]
		if ch == '\n' {
			c.lineStart, c.n = true, 0
			continue
		}
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		c.name[c.n] = ch
		c.n++
		got := c.name[:c.n]
		switch {
		case bytes.Equal(got, teName):
			c.marks.Or(markTE)
			c.n = -1
		case bytes.Equal(got, clName):
			c.marks.Or(markCL)
			c.n = -1
		case !bytes.HasPrefix(teName, got) && !bytes.HasPrefix(clName, got):
			c.n = -1
		}
	}
}

// ambiguous takes the marks noted since the last call and reports whether
// r, whose head they include, was framed ambiguously: Transfer-Encoding
// with Content-Length, or Transfer-Encoding in HTTP/1.0.
func (c *framingConn) ambiguous(r *http.Request) bool {
	m := c.marks.Swap(0)
	if m&markTE == 0 {
		return false
	}
	return m&markCL != 0 || !r.ProtoAtLeast(1, 1)
}

// connContext puts a framingConn in its requests' context.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if fc, ok := c.(*framingConn); ok {
		return context.WithValue(ctx, framingKey{}, fc)
	}
	return ctx
}
