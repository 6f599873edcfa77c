package proxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"
)

// Defaults of a listener's stall bounds (see [Listener]).
const (
	DefaultBodyTimeout  = 30 * time.Second
	DefaultWriteTimeout = 30 * time.Second
	// headerTimeout bounds the reading of a request's head, idleTimeout
	// a keep-alive connection's wait for its next request.
	headerTimeout = 10 * time.Second
	idleTimeout   = 2 * time.Minute
)

// errBodyStalled is the error a request body's read returns when the
// client sent none of it for the listener's body_timeout.
var errBodyStalled = errors.New("request body stalled past the listener's body_timeout")

// front is the first handler of a traffic listener, in front of its
// max_in_flight bound: it bounds how long a request may wait on its client
// (the next bytes of its body, the client taking the next bytes of the
// answer), so that stalled clients release the bound's slots, and closes
// the connection after a request whose framing was ambiguous.
type front struct {
	next        http.Handler
	body, write time.Duration // zero: no bound
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
		sb := &stallBody{ReadCloser: r.Body, rc: rc, deadline: deadline{d: f.body}, cut: &f.cut.body}
		// A copy (the server keeps its own Body), whose context says
		// where to look for a stall: the read error that tells it also
		// cancels the request, so the error a handler sees may be
		// context.Canceled.
		r = r.WithContext(context.WithValue(r.Context(), stallKey{}, sb))
		r.Body = sb
	}
	if f.write > 0 {
		sw := &stallWriter{ResponseWriter: w, rc: rc, deadline: deadline{d: f.write}, cut: &f.cut.write}
		w = sw
		// The server flushes what is still buffered after the handler
		// returns: give that its own window.
		defer sw.arm(true)
	}
	f.next.ServeHTTP(w, r)
}

// deadline is a connection deadline pushed d past now before each
// operation, and only when it is an eighth of d stale, so that most
// operations cost a clock read and no timer change: an operation waits
// between 7/8 of d and d for its client.
type deadline struct {
	d     time.Duration
	until time.Time
}

// next returns the deadline to set before an operation at now, or the
// zero time and false if the one set is fresh enough (unless force).
func (dl *deadline) next(now time.Time, force bool) (time.Time, bool) {
	if !force && dl.until.Sub(now) > dl.d-dl.d/8 {
		return time.Time{}, false
	}
	dl.until = now.Add(dl.d)
	return dl.until, true
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
	deadline
	done    bool
	stalled atomic.Bool
	cut     *atomic.Int64
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
	if t, ok := b.next(time.Now(), false); ok {
		_ = b.rc.SetReadDeadline(t)
	}
	n, err := b.ReadCloser.Read(p)
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
	deadline
	stalled bool
	cut     *atomic.Int64
}

func (w *stallWriter) arm(force bool) {
	if t, ok := w.next(time.Now(), force); ok {
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
	w.arm(false)
	n, err := w.ResponseWriter.Write(p)
	return n, w.check(err)
}

// Flush flushes, as http.Flusher.
func (w *stallWriter) Flush() { _ = w.FlushError() }

// FlushError flushes, as http.ResponseController does.
func (w *stallWriter) FlushError() error {
	w.arm(false)
	return w.check(w.rc.Flush())
}

// Unwrap returns the server's ResponseWriter (for
// http.ResponseController: Hijack, deadlines).
func (w *stallWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

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
