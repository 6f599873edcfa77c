package proxy

import (
	"bytes"
	"errors"
	"net/http"
	"net/url"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// The escaped_slashes actions (see [Paths]).
const (
	EscapedSlashesReject   = "reject"
	EscapedSlashesKeep     = "keep"
	EscapedSlashesUnescape = "unescape"
)

// The semicolons readings (see [Paths]).
const (
	SemicolonsParams = "params"
	SemicolonsReject = "reject"
	SemicolonsData   = "data"
)

// pathRules is the normalisation of request paths in force: a [Paths]
// with its defaults applied.
type pathRules struct {
	escaped string // one of the EscapedSlashes actions
	merge   bool
	semi    string // one of the Semicolons readings
}

func (p Paths) rules() pathRules {
	r := pathRules{escaped: p.EscapedSlashes, merge: p.MergeSlashes == nil || *p.MergeSlashes, semi: p.Semicolons}
	if r.escaped == "" {
		r.escaped = EscapedSlashesReject
	}
	if r.semi == "" {
		r.semi = SemicolonsParams
	}
	return r
}

var (
	errEscapedSlash = errors.New("encoded slash or backslash in path")
	errBadEscape    = errors.New("malformed percent-encoding in path")
	errNotAbsolute  = errors.New("path does not start with /")
	errDotParams    = errors.New("dot-segment with parameters in path")
)

// normalize returns the normal form of the escaped path p (a request's
// path as it arrived, without the query), in which the proxy matches the
// request to a route and forwards it:
//
//   - percent-encodings of unreserved characters (RFC 3986 §2.3: letters,
//     digits, "-", ".", "_", "~") are decoded, other encodings are kept
//     with upper-case hex, and bytes not allowed in a path are encoded;
//   - %2F, %5C and a literal backslash are rejected (errEscapedSlash),
//     kept as %2F and %5C (data inside a segment, never a separator) or
//     decoded into "/", as the rules say;
//   - runs of "/" are merged into one if the rules say so;
//   - a segment that is "." or ".." up to its first ";" (a dot-segment
//     with parameters, which servlet containers read as the dot-segment)
//     is made that dot-segment, or rejected (errDotParams), unless the
//     rules read ";" as data;
//   - dot-segments are removed (RFC 3986 §5.2.4), after the decoding, so
//     that %2e%2e and .%2e;x are a ".." like any other.
//
// normalize is idempotent, and its result starts with "/" and holds no
// dot-segment, nor (unless ";" is data) a dot-segment with parameters. A
// path of allowed characters without escapes, "//" or a
// segment starting with "." costs one scan and no allocation
// (BenchmarkNormalize).
func (r pathRules) normalize(p string) (string, error) {
	if p == "" {
		return "/", nil
	}
	if p[0] != '/' {
		return "", errNotAbsolute
	}
	if r.isNormal(p) {
		return p, nil
	}
	const upperhex = "0123456789ABCDEF"
	b := make([]byte, 0, len(p)+8)
	for i := 0; i < len(p); i++ {
		c := p[i]
		encoded := false
		if c == '%' {
			if i+2 >= len(p) || !isHex(p[i+1]) || !isHex(p[i+2]) {
				return "", errBadEscape
			}
			c, encoded = unhex(p[i+1])<<4|unhex(p[i+2]), true
			i += 2
		}
		slash := c == '/' && !encoded
		if !slash && (c == '/' || c == '\\') {
			switch r.escaped {
			case EscapedSlashesKeep:
				b = append(b, '%', upperhex[c>>4], upperhex[c&15])
				continue
			case EscapedSlashesUnescape:
				slash = true
			default:
				return "", errEscapedSlash
			}
		}
		switch {
		case slash:
			if !r.merge || len(b) == 0 || b[len(b)-1] != '/' {
				b = append(b, '/')
			}
		case unreserved[c] || !encoded && pathChar[c]:
			b = append(b, c)
		default:
			b = append(b, '%', upperhex[c>>4], upperhex[c&15])
		}
	}
	if r.semi != SemicolonsData {
		var err error
		if b, err = r.dropDotParams(b); err != nil {
			return "", err
		}
	}
	return removeDotSegments(string(b)), nil
}

// dropDotParams makes each segment of b (a path starting with "/") that
// is "." or ".." up to its first ";" that bare dot-segment, as a servlet
// container reads it (it strips every segment's ";" parameters before it
// resolves dot-segments), or returns errDotParams if the rules reject
// them. Other segments keep their parameters (";jsessionid=…").
func (r pathRules) dropDotParams(b []byte) ([]byte, error) {
	out := b[:0] // in place: a segment only ever shrinks
	for len(b) > 0 {
		end := bytes.IndexByte(b[1:], '/') + 1
		if end == 0 {
			end = len(b)
		}
		seg := b[:end] // "/" and the segment
		if semi := bytes.IndexByte(seg, ';'); semi > 0 {
			if name := seg[1:semi]; string(name) == "." || string(name) == ".." {
				if r.semi == SemicolonsReject {
					return nil, errDotParams
				}
				seg = seg[:semi]
			}
		}
		out = append(out, seg...)
		b = b[end:]
	}
	return out, nil
}

// isNormal reports whether p is already in normal form by a quick scan:
// only unreserved and allowed characters, no escapes, no backslash, no
// segment starting with a dot, and no "//" when slashes are merged.
func (r pathRules) isNormal(p string) bool {
	for i := 0; i < len(p); i++ {
		c := p[i]
		if !pathChar[c] {
			return false
		}
		if c == '/' && i+1 < len(p) && (p[i+1] == '.' || r.merge && p[i+1] == '/') {
			return false
		}
	}
	return true
}

// removeDotSegments is RFC 3986 §5.2.4's remove_dot_segments, step by
// step (the comments name the steps), in time linear in len(in): the
// start of each segment in the output is kept, so that step C removes the
// last one without a search.
func removeDotSegments(in string) string {
	out := make([]byte, 0, len(in))
	var buf [32]int
	starts := buf[:0]
	pop := func() {
		if n := len(starts); n > 0 {
			out = out[:starts[n-1]]
			starts = starts[:n-1]
		}
	}
	for in != "" {
		switch {
		case strings.HasPrefix(in, "../"): // A
			in = in[3:]
		case strings.HasPrefix(in, "./"): // A
			in = in[2:]
		case strings.HasPrefix(in, "/./"): // B
			in = in[2:]
		case in == "/.": // B
			in = "/"
		case strings.HasPrefix(in, "/../"): // C
			in = in[3:]
			pop()
		case in == "/..": // C
			in = "/"
			pop()
		case in == "." || in == "..": // D
			in = ""
		default: // E: move the first segment, with its "/" if any
			end := strings.IndexByte(in[1:], '/') + 1
			if end == 0 {
				end = len(in)
			}
			starts = append(starts, len(out))
			out = append(out, in[:end]...)
			in = in[end:]
		}
	}
	return string(out)
}

// unreserved holds the unreserved characters (RFC 3986 §2.3); pathChar
// those that may appear unencoded in a path: the unreserved ones, the
// sub-delimiters, ":", "@" and "/" (§3.3).
var unreserved, pathChar = func() (u, p [256]bool) {
	for c := 0; c < 256; c++ {
		u[c] = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			c == '-' || c == '.' || c == '_' || c == '~'
		p[c] = u[c] || strings.IndexByte("!$&'()*+,;=:@/", byte(c)) >= 0
	}
	return u, p
}()

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}

// escapedPath returns u's path as the client sent it: RawPath if it is an
// encoding of Path (url.URL keeps the original only when it differs from
// Path's default encoding), else Path's default encoding, which is then
// the original.
func escapedPath(u *url.URL) string {
	if u.RawPath != "" {
		if p, err := url.PathUnescape(u.RawPath); err == nil && p == u.Path {
			return u.RawPath
		}
	}
	return u.EscapedPath()
}

// allowMethods is the Allow header of a 405: the methods the proxy
// forwards (any method but CONNECT and TRACE is forwarded; these are the
// usual ones).
const allowMethods = "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"

// admit checks and normalises a request before anything else sees it:
// CONNECT and TRACE get 405, a path the rules refuse or a malformed Host
// gets 400; otherwise
// it returns the request with its path in normal form (req itself if it
// already was), Path and RawPath set together, so that what the routes
// match is what the upstream receives.
func (s *Server) admit(w http.ResponseWriter, req *http.Request, rules pathRules) (*http.Request, bool) {
	switch req.Method {
	case http.MethodConnect, http.MethodTrace:
		// The proxy is not a tunnel (CONNECT); TRACE would echo the
		// request back, credentials included (RFC 9110 §9.3.8).
		s.refused.method.Add(1)
		w.Header().Set("Allow", allowMethods)
		http.Error(w, "tailcut proxy: method not allowed", http.StatusMethodNotAllowed)
		return nil, false
	}
	if !httpguts.ValidHostHeader(req.Host) {
		// net/http's server refuses these itself; a Handler used without
		// it must not match one host and forward another (the client
		// would send an invalid Host as an empty one).
		s.refused.path.Add(1)
		http.Error(w, "tailcut proxy: malformed Host header", http.StatusBadRequest)
		return nil, false
	}
	raw := escapedPath(req.URL)
	norm, err := rules.normalize(raw)
	if err != nil {
		s.refused.path.Add(1)
		http.Error(w, "tailcut proxy: "+err.Error(), http.StatusBadRequest)
		return nil, false
	}
	if norm == raw && (req.URL.RawPath == "" || req.URL.RawPath == norm) {
		return req, true
	}
	path, err := url.PathUnescape(norm)
	if err != nil { // not expected: norm's escapes are all well formed
		s.refused.path.Add(1)
		http.Error(w, "tailcut proxy: "+err.Error(), http.StatusBadRequest)
		return nil, false
	}
	out := req.WithContext(req.Context())
	u := *req.URL
	u.Path, u.RawPath = path, norm
	out.URL = &u
	if req.RequestURI != "" {
		out.RequestURI = u.RequestURI()
	}
	return out, true
}
