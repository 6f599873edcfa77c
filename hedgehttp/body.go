package hedgehttp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
)

// body wraps the winning response's body: it hands back the byte read ahead
// by WithFirstByte, and releases the attempt's context (and the hard
// timeout's) once the body is read to the end or closed — the same point at
// which http.Client stops its own timeout timer.
//
// Its small fields share a word: a hedge in flight allocates one, and the
// primary's is a part of roundTrip (BenchmarkInflightMemory in bench).
type body struct {
	rc            io.ReadCloser
	release       func()
	cancelTimeout context.CancelFunc
	cancelReq     context.CancelFunc // a hedge's own request context (roundTrip.graceful)
	ahead         *aheadRead         // a failed attempt's small body, read ahead (readAhead)
	released      atomic.Bool
	peek          [1]byte
	npeek         uint8 // 0 or 1: whether peek holds the body's first byte
	// failed marks the body of a failed attempt's response (judge), which
	// discard closes without waiting for it.
	failed bool
}

// aheadRead is the read of a body's readAhead.
type aheadRead struct {
	done  chan struct{} // closed once buf and err are set
	buf   []byte        // what is left of the body read
	err   error         // the read's error, nil for the whole body
	state atomic.Int32  // aheadRunning, aheadDone or aheadAbandoned
}

// The states of a body's readAhead.
const (
	aheadRunning = iota
	aheadDone
	aheadAbandoned // closed before the read ended: readAhead closes rc
)

// FailedDrainLimit is the largest declared body of a failed attempt
// (judge) that is read ahead, so that its HTTP/1.1 connection can go back
// to the pool instead of being closed.
const FailedDrainLimit = 4 << 10

// readAhead reads the body, of declared length n, on a goroutine of its
// own: nobody waits for it. Read hands back what it read once it is done;
// a Close before then leaves the read to end with the attempt's context
// (which closing the body ends) and the goroutine to close the body.
// The attempt's result is reported meanwhile: a body whose bytes came with
// the status line is read at once and its connection kept, a slow one
// costs its connection as if closed unread, and the decision waits for
// neither.
func (b *body) readAhead(n int64) {
	a := &aheadRead{done: make(chan struct{})}
	b.ahead = a
	go func() {
		a.buf, a.err = io.ReadAll(io.LimitReader(b.rc, n+1))
		close(a.done)
		if !a.state.CompareAndSwap(aheadRunning, aheadDone) {
			b.rc.Close()
		}
	}()
}

func (b *body) Read(p []byte) (int, error) {
	if a := b.ahead; a != nil {
		<-a.done
		if len(a.buf) > 0 {
			n := copy(p, a.buf)
			a.buf = a.buf[n:]
			return n, nil
		}
		err := a.err
		if err == nil {
			err = io.EOF
		}
		b.done()
		return 0, err
	}
	if b.npeek > 0 && len(p) > 0 {
		p[0] = b.peek[0]
		b.npeek = 0
		if len(p) == 1 {
			return 1, nil
		}
		n, err := b.rc.Read(p[1:])
		if err != nil {
			b.done()
		}
		return n + 1, err
	}
	n, err := b.rc.Read(p)
	if err != nil {
		b.done()
	}
	return n, err
}

func (b *body) Close() error {
	if a := b.ahead; a != nil && (a.state.CompareAndSwap(aheadRunning, aheadAbandoned) || a.state.Load() == aheadAbandoned) {
		b.done() // ends the attempt's context, and with it the read
		return nil
	}
	err := b.rc.Close()
	b.done()
	return err
}

func (b *body) done() {
	if b.released.CompareAndSwap(false, true) {
		if b.release != nil {
			b.release()
		}
		if b.cancelTimeout != nil {
			b.cancelTimeout()
		}
		if b.cancelReq != nil {
			b.cancelReq()
		}
	}
}

// wrapBody wraps resp's body in b (which the caller owns), unless there is
// no body.
func wrapBody(resp *http.Response, b *body) {
	if resp.Body == nil || resp.Body == http.NoBody {
		return
	}
	b.rc = resp.Body
	resp.Body = b
}

// peekFirstByte waits for the first byte of resp's body (wrapped by
// wrapBody), or its end, and keeps it to hand back. On a read error the
// body is closed and the error returned.
func peekFirstByte(resp *http.Response) error {
	b, ok := resp.Body.(*body)
	if !ok {
		return nil // no body
	}
	n, err := b.rc.Read(b.peek[:])
	for n == 0 && err == nil {
		n, err = b.rc.Read(b.peek[:])
	}
	b.npeek = uint8(n)
	if err != nil && err != io.EOF {
		resp.Body.Close()
		return err
	}
	if err == io.EOF && n == 0 {
		// An empty body: nothing to hold back.
		resp.Body.Close()
		resp.Body = http.NoBody
	}
	return nil
}

// readUpTo reads r until EOF or until more than limit bytes have been read.
// whole reports whether EOF came first, in which case buf is all of r.
func readUpTo(r io.Reader, limit int64) (buf []byte, whole bool, err error) {
	buf, err = io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return buf, false, err
	}
	return buf, int64(len(buf)) <= limit, nil
}

// readFullUpTo is readUpTo into one buffer of limit+1 bytes, made at once:
// for a body of declared length, which then takes no more memory than
// that.
func readFullUpTo(r io.Reader, limit int64) (buf []byte, whole bool, err error) {
	buf = make([]byte, limit+1)
	n, err := io.ReadFull(r, buf)
	switch err {
	case io.EOF, io.ErrUnexpectedEOF:
		return buf[:n], true, nil
	case nil:
		return buf, false, nil
	}
	return buf[:n], false, err
}

// readBody reads a request body to replay it in hedges: all of it when it
// holds at most limit bytes (whole reports that it does). declared is the
// request's ContentLength, ≤ 0 when unknown. A body shorter or longer than
// declared fails the request before anything is sent, with the error
// net/http's transport gives it (transfer.go, transferWriter.writeBody),
// which counts the whole body: the rest is counted up to DrainLimit bytes.
func readBody(r io.Reader, declared, limit int64) (buf []byte, whole bool, err error) {
	if declared > 0 {
		limit = declared
		buf, whole, err = readFullUpTo(r, limit)
	} else {
		buf, whole, err = readUpTo(r, limit)
	}
	if err != nil {
		return nil, false, fmt.Errorf("hedgehttp: reading the request body: %w", err)
	}
	n := int64(len(buf))
	if declared <= 0 || whole && n == declared {
		return buf, whole, nil
	}
	if whole {
		return nil, false, fmt.Errorf("http: ContentLength=%d with Body length %d", declared, n)
	}
	rest, err := io.Copy(io.Discard, io.LimitReader(r, DrainLimit+1))
	if err != nil {
		return nil, false, fmt.Errorf("hedgehttp: reading the request body: %w", err)
	}
	if rest > DrainLimit {
		return nil, false, fmt.Errorf("http: ContentLength=%d with Body length over %d", declared, n+DrainLimit)
	}
	return nil, false, fmt.Errorf("http: ContentLength=%d with Body length %d", declared, n+rest)
}

// prefixedBody is a body of which a prefix has been read already: Reader
// yields the prefix then the rest, and Close closes the original.
type prefixedBody struct {
	io.Reader
	c io.Closer
}

func (b *prefixedBody) Close() error { return b.c.Close() }
