package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	pathpkg "path"
	"strings"
	"sync"
	"testing"
)

// rawUpstream is a loopback replica that records the request-target of
// every request exactly as it arrived, and serves a secret under /private/.
type rawUpstream struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string // RequestURI as received
}

func startRawUpstream(t *testing.T) *rawUpstream {
	t.Helper()
	u := &rawUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, r.RequestURI)
		u.mu.Unlock()
		if strings.HasPrefix(pathpkg.Clean(r.URL.Path), "/private") {
			io.WriteString(w, "SECRET")
			return
		}
		io.WriteString(w, "public")
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *rawUpstream) received() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.seen...)
}

func (u *rawUpstream) reset() {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.seen = nil
}

// rawRequest writes a request line with target verbatim to the server at
// base (an http:// URL) and returns the answer's status and body.
func rawRequest(t *testing.T, base, method, target string) (int, http.Header, string) {
	t.Helper()
	conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "%s %s HTTP/1.1\r\nHost: app.test\r\nConnection: close\r\n\r\n", method, target)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("%s %s: %v", method, target, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(b)
}

// publicProxy is a proxy with one route, /public/ to u (unhedged, so that
// each request reaches u once), and the extra config lines given.
func publicProxy(t *testing.T, u *rawUpstream, extra string) *testProxy {
	t.Helper()
	return startProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: [%q]}]
routes: [{name: public, path_prefix: /public/, upstream: u, policy: {hedge: false}}]
%s
`, u.URL, extra))
}

// The attack paths: with only /public/ routed to an upstream that
// also serves /private/, none of them reaches /private/ upstream.
func TestProxyDotSegmentsStayInRoute(t *testing.T) {
	u := startRawUpstream(t)
	p := publicProxy(t, u, "")
	for _, c := range []struct {
		target string
		want   int
	}{
		{"/private/x", http.StatusNotFound},
		{"/public/../private/x", http.StatusNotFound},
		{"/public/%2e%2e/private/x", http.StatusNotFound},
		{"/public/%2E%2E/private/x", http.StatusNotFound},
		{"/public/..%2fprivate/x", http.StatusBadRequest},
		{"/public/..%2Fprivate/x", http.StatusBadRequest},
		{"/public/..%5cprivate/x", http.StatusBadRequest},
		{`/public/..\private/x`, http.StatusBadRequest},
		{"/public/./../private/x", http.StatusNotFound},
		{"/public/%2e/%2e%2e/private/x", http.StatusNotFound},
		{"/public/.%2e/private/x", http.StatusNotFound},
		{"/public//../../private/x", http.StatusNotFound},
		{"/public/a/../../private/x?q=1", http.StatusNotFound},
	} {
		code, _, body := rawRequest(t, p.url, http.MethodGet, c.target)
		if code != c.want || strings.Contains(body, "SECRET") {
			t.Errorf("GET %s: %d %q, want %d", c.target, code, body, c.want)
		}
	}
	for _, got := range u.received() {
		t.Errorf("upstream received %q", got)
	}
}

// What the route matched is what the upstream receives: dot-segments
// removed, unreserved characters decoded, other escapes in upper case.
func TestProxyForwardsNormalisedPath(t *testing.T) {
	u := startRawUpstream(t)
	p := startProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: [%q]}, {name: v, urls: [%q]}]
routes:
  - {name: public, path_prefix: /public/, upstream: u, policy: {hedge: false}}
  - {name: v2, path_prefix: /v/, upstream: v, policy: {hedge: false}}
`, u.URL, u.URL+"/base"))
	for _, c := range []struct{ target, want string }{
		{"/public/a/./b/../c", "/public/a/c"},
		{"/public/%7euser/%e2%82%ac", "/public/~user/%E2%82%AC"},
		{"/public/%41%2d%5F", "/public/A-_"},
		{"/public/x/..", "/public/"},
		{"/public//a///b", "/public/a/b"},
		{"/public/a%20b?x=%2e%2e&y", "/public/a%20b?x=%2e%2e&y"},
		{"/public/%3f%23", "/public/%3F%23"},
		{"/public/caf\xc3\xa9", "/public/caf%C3%A9"},
		{"/v/../v/x", "/base/v/x"},
	} {
		u.reset()
		code, _, _ := rawRequest(t, p.url, http.MethodGet, c.target)
		got := u.received()
		if code != http.StatusOK || len(got) != 1 || got[0] != c.want {
			t.Errorf("GET %s: %d, upstream received %q, want %q", c.target, code, got, c.want)
		}
	}
}

// Encoded slashes and backslashes: rejected by default, forwarded as they
// are with keep, or made separators with unescape.
func TestProxyEscapedSlashes(t *testing.T) {
	u := startRawUpstream(t)
	for _, c := range []struct {
		action, target string
		code           int
		want           string // what the upstream receives; "" nothing
	}{
		{"", "/public/a%2fb", http.StatusBadRequest, ""},
		{"reject", `/public/a\b`, http.StatusBadRequest, ""},
		{"keep", "/public/a%2fb", http.StatusOK, "/public/a%2Fb"},
		{"keep", "/public/..%2fprivate/x", http.StatusOK, "/public/..%2Fprivate/x"},
		{"keep", `/public/a\b%5c`, http.StatusOK, "/public/a%5Cb%5C"},
		{"unescape", "/public/a%2fb", http.StatusOK, "/public/a/b"},
		{"unescape", `/public/a\b%5Cc`, http.StatusOK, "/public/a/b/c"},
		{"unescape", "/public/..%2fprivate/x", http.StatusNotFound, ""},
		{"unescape", "/public/x%2f..%2f..%5cprivate", http.StatusNotFound, ""},
	} {
		paths := ""
		if c.action != "" {
			paths = "paths: {escaped_slashes: " + c.action + "}"
		}
		p := publicProxy(t, u, paths)
		u.reset()
		code, _, _ := rawRequest(t, p.url, http.MethodGet, c.target)
		got := u.received()
		if code != c.code || (c.want == "") != (len(got) == 0) || len(got) > 0 && got[0] != c.want {
			t.Errorf("%s: GET %s: %d, upstream received %q; want %d, %q", c.action, c.target, code, got, c.code, c.want)
		}
	}
}

// merge_slashes: false keeps empty segments (and a dot-segment then
// removes one of them, as RFC 3986 says).
func TestProxyMergeSlashesOff(t *testing.T) {
	u := startRawUpstream(t)
	p := publicProxy(t, u, "paths: {merge_slashes: false}")
	for _, c := range []struct{ target, want string }{
		{"/public//a", "/public//a"},
		{"/public//../a", "/public/a"},
	} {
		u.reset()
		code, _, _ := rawRequest(t, p.url, http.MethodGet, c.target)
		if got := u.received(); code != http.StatusOK || len(got) != 1 || got[0] != c.want {
			t.Errorf("GET %s: %d, upstream received %q, want %q", c.target, code, got, c.want)
		}
	}
}

// The proxy is not a tunnel: CONNECT gets 405, and TRACE (which would
// echo the client's headers back, cookies included) is not forwarded.
func TestProxyRefusesConnectAndTrace(t *testing.T) {
	u := startRawUpstream(t)
	p := startProxy(t, fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: [%q]}]
routes: [{name: all, upstream: u, policy: {hedge: false}}]
`, u.URL))
	host := strings.TrimPrefix(u.URL, "http://")
	for _, c := range []struct{ method, target string }{
		{http.MethodConnect, host},
		{http.MethodConnect, "/"},
		{http.MethodTrace, "/"},
		{http.MethodTrace, "/public/x"},
	} {
		code, h, _ := rawRequest(t, p.url, c.method, c.target)
		if code != http.StatusMethodNotAllowed || h.Get("Allow") == "" {
			t.Errorf("%s %s: %d (Allow %q), want 405 with Allow", c.method, c.target, code, h.Get("Allow"))
		}
	}
	for _, got := range u.received() {
		t.Errorf("upstream received %q", got)
	}
	if d := p.Debug(); d.Refused.Method != 4 {
		t.Errorf("debug refused %+v, want 4 for the method", d.Refused)
	}
}

// remove_dot_segments on RFC 3986's examples: §5.2.4's two, and the paths
// of §5.4's reference resolution examples (normal and abnormal) against
// the base path /b/c/d;p, merged as §5.2.3 says.
func TestRemoveDotSegmentsRFC3986(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"/a/b/c/./../../g", "/a/g"},
		{"mid/content=5/../6", "mid/6"},
	} {
		if got := removeDotSegments(c.in); got != c.want {
			t.Errorf("removeDotSegments(%q) = %q, want %q", c.in, got, c.want)
		}
	}
	const base = "/b/c/" // /b/c/d;p without its last segment
	for _, c := range []struct{ ref, want string }{
		// §5.4.1
		{"g", "/b/c/g"}, {"./g", "/b/c/g"}, {"g/", "/b/c/g/"}, {"/g", "/g"},
		{";x", "/b/c/;x"}, {"g;x", "/b/c/g;x"}, {".", "/b/c/"}, {"./", "/b/c/"},
		{"..", "/b/"}, {"../", "/b/"}, {"../g", "/b/g"}, {"../..", "/"},
		{"../../", "/"}, {"../../g", "/g"},
		// §5.4.2
		{"../../../g", "/g"}, {"../../../../g", "/g"}, {"/./g", "/g"},
		{"/../g", "/g"}, {"g.", "/b/c/g."}, {".g", "/b/c/.g"}, {"g..", "/b/c/g.."},
		{"..g", "/b/c/..g"}, {"./../g", "/b/g"}, {"./g/.", "/b/c/g/"},
		{"g/./h", "/b/c/g/h"}, {"g/../h", "/b/c/h"}, {"g;x=1/./y", "/b/c/g;x=1/y"},
		{"g;x=1/../y", "/b/c/y"},
	} {
		in := base + c.ref
		if strings.HasPrefix(c.ref, "/") {
			in = c.ref
		}
		if got := removeDotSegments(in); got != c.want {
			t.Errorf("ref %q: removeDotSegments(%q) = %q, want %q", c.ref, in, got, c.want)
		}
		// normalize gives the same for these (no escapes, no "//").
		if got, err := (pathRules{escaped: EscapedSlashesReject, merge: true}).normalize(in); err != nil || got != c.want {
			t.Errorf("ref %q: normalize(%q) = %q, %v, want %q", c.ref, in, got, err, c.want)
		}
	}
}

func TestNormalize(t *testing.T) {
	reject := pathRules{escaped: EscapedSlashesReject, merge: true, semi: SemicolonsParams}
	keep := pathRules{escaped: EscapedSlashesKeep, merge: true, semi: SemicolonsParams}
	unescape := pathRules{escaped: EscapedSlashesUnescape, merge: true, semi: SemicolonsParams}
	noMerge := pathRules{escaped: EscapedSlashesReject, semi: SemicolonsParams}
	rejectParams := pathRules{escaped: EscapedSlashesReject, merge: true, semi: SemicolonsReject}
	data := pathRules{escaped: EscapedSlashesReject, merge: true, semi: SemicolonsData}
	for _, c := range []struct {
		rules    pathRules
		in, want string
		err      error
	}{
		{reject, "", "/", nil},
		{reject, "/", "/", nil},
		{reject, "/api/v1/users", "/api/v1/users", nil},
		{reject, "/%2e%2E/%2e", "/", nil},
		{reject, "/a/%2e%2e%2Fb", "", errEscapedSlash},
		{reject, "/a%5cb", "", errEscapedSlash},
		{reject, `/a\b`, "", errEscapedSlash},
		{reject, "/%7E%61%2D%30", "/~a-0", nil},
		{reject, "/%3a%40%25%20", "/%3A%40%25%20", nil},
		{reject, "/a%2", "", errBadEscape},
		{reject, "/a%zz", "", errBadEscape},
		{reject, "*", "", errNotAbsolute},
		{reject, "/a b\"<>`{}|^[]#?", "/a%20b%22%3C%3E%60%7B%7D%7C%5E%5B%5D%23%3F", nil},
		{reject, "/!$&'()*+,;=:@", "/!$&'()*+,;=:@", nil},
		{reject, "/.well-known/x", "/.well-known/x", nil},
		{reject, "//a//b//", "/a/b/", nil},
		{reject, "/a//../b", "/b", nil},
		{noMerge, "/a//../b", "/a/b", nil},
		{noMerge, "//a//b//", "//a//b//", nil},
		{keep, "/a%2fb/..%5C/c", "/a%2Fb/..%5C/c", nil},
		{keep, `/a\..`, "/a%5C..", nil},
		{unescape, "/a%2fb/..%5C/c", "/a/c", nil},
		{unescape, `/a\..\..\b`, "/b", nil},
		{unescape, "/a%2f%2f%2fb", "/a/b", nil},
		// A dot-segment with parameters is the dot-segment (servlet
		// containers strip ";..." before resolving dot-segments).
		{reject, "/public/..;/private/x.txt", "/private/x.txt", nil},
		{reject, "/public/%2e%2e;/private/x.txt", "/private/x.txt", nil},
		{reject, "/public/..;x=1/private/x.txt", "/private/x.txt", nil},
		{reject, "/public/x/..;/..;/private/x.txt", "/private/x.txt", nil},
		{reject, "/public/.%2E;a;b/x/.;", "/x/", nil},
		{reject, "/a/b/..;", "/a/", nil},
		{reject, "/a/;x/..;/b", "/a/b", nil},
		{reject, "/public/a;jsessionid=1/b;v=2", "/public/a;jsessionid=1/b;v=2", nil},
		{reject, "/public/..x;/..%3B/.;x=/", "/public/..x;/..%3B/", nil},
		{unescape, "/public/x%2f..;%2f..;/y", "/y", nil},
		{noMerge, "/a//..;/b", "/a/b", nil},
		{rejectParams, "/public/..;/private/x.txt", "", errDotParams},
		{rejectParams, "/public/%2e;x/y", "", errDotParams},
		{rejectParams, "/public/a;x/../b;y", "/public/b;y", nil},
		{data, "/public/..;/private/x.txt", "/public/..;/private/x.txt", nil},
		{data, "/public/%2e%2e;x/../y", "/public/y", nil},
	} {
		got, err := c.rules.normalize(c.in)
		if got != c.want || err != c.err {
			t.Errorf("%+v normalize(%q) = %q, %v; want %q, %v", c.rules, c.in, got, err, c.want, c.err)
		}
	}
}

// decodeAll decodes every escape of an escaped path, reading %2F, %5C and
// a backslash as "/" (what the most lenient upstream does).
func decodeAll(p string) string {
	p = strings.ReplaceAll(p, "\\", "/")
	var b strings.Builder
	for i := 0; i < len(p); i++ {
		if p[i] == '%' && i+2 < len(p) && isHex(p[i+1]) && isHex(p[i+2]) {
			c := unhex(p[i+1])<<4 | unhex(p[i+2])
			if c == '\\' {
				c = '/'
			}
			b.WriteByte(c)
			i += 2
			continue
		}
		b.WriteByte(p[i])
	}
	return b.String()
}

// dotParamsToDots reads p (decoded, but for %3B) as a servlet container
// does its dot-segments: a segment that is "." or ".." up to its first
// ";" is that dot-segment.
func dotParamsToDots(p string) string {
	segs := strings.Split(p, "/")
	for i, seg := range segs {
		if name, _, ok := strings.Cut(seg, ";"); ok && (name == "." || name == "..") {
			segs[i] = name
		}
	}
	return strings.Join(segs, "/")
}

// The normal form is a fixed point, holds no dot-segment, no dot-segment
// with parameters (unless ";" is data), no "//" when slashes are merged
// and only allowed characters; and it means what the standard library's
// path.Clean makes of the fully decoded input (with dot-segments with
// parameters read as their dot-segment, unless ";" is data).
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{"/", "/a/b/c/./../../g", "/public/%2e%2e/private", "/a%2f..%5c..\\b",
		"//a//../b/", "/%7e%zz", "/caf\xc3\xa9/%E2%82%AC", "/.well-known/../..", "/a/%2e%2E%2e/b",
		"/public/..;/private/x.txt", "/public/%2e%2e;/private/x.txt", "/public/..;x=1/private/x.txt",
		"/public/x/..;/..;/private/x.txt", "/p/.;/..%3b/.%2E;a=b;c/%3B..;", "/a/;x/..;/b;c/.;",
		"/a%2f..;%5c.;x/b"} {
		f.Add(s)
	}
	var all []pathRules
	for _, semi := range []string{SemicolonsParams, SemicolonsReject, SemicolonsData} {
		all = append(all,
			pathRules{escaped: EscapedSlashesReject, merge: true, semi: semi},
			pathRules{escaped: EscapedSlashesKeep, merge: true, semi: semi},
			pathRules{escaped: EscapedSlashesUnescape, merge: true, semi: semi},
			pathRules{escaped: EscapedSlashesReject, semi: semi},
			pathRules{escaped: EscapedSlashesUnescape, semi: semi})
	}
	// decode decodes every escape but %3B (data, never a delimiter of
	// parameters), and reads dot-segments with parameters as a servlet
	// container does unless ";" is data.
	decode := func(r pathRules, p string) string {
		p = strings.ReplaceAll(strings.ReplaceAll(p, "%3b", "%3B"), "%3B", "\x00")
		p = decodeAll(p)
		if r.semi != SemicolonsData {
			p = dotParamsToDots(p)
		}
		return strings.ReplaceAll(p, "\x00", "%3B")
	}
	f.Fuzz(func(t *testing.T, in string) {
		for _, r := range all {
			got, err := r.normalize(in)
			if err != nil {
				continue
			}
			if again, err := r.normalize(got); err != nil || again != got {
				t.Fatalf("%+v: normalize(%q) = %q, and again %q, %v", r, in, got, again, err)
			}
			if !strings.HasPrefix(got, "/") || r.merge && strings.Contains(got, "//") {
				t.Fatalf("%+v: normalize(%q) = %q", r, in, got)
			}
			for _, seg := range strings.Split(got, "/") {
				if seg == "." || seg == ".." {
					t.Fatalf("%+v: normalize(%q) = %q holds a dot-segment", r, in, got)
				}
				if name, _, _ := strings.Cut(seg, ";"); r.semi != SemicolonsData && (name == "." || name == "..") {
					t.Fatalf("%+v: normalize(%q) = %q holds a dot-segment with parameters", r, in, got)
				}
			}
			for i := 0; i < len(got); i++ {
				if c := got[i]; c == '%' {
					if i+2 >= len(got) || strings.ToUpper(got[i+1:i+3]) != got[i+1:i+3] || !isHex(got[i+1]) || !isHex(got[i+2]) {
						t.Fatalf("%+v: normalize(%q) = %q: bad escape at %d", r, in, got, i)
					}
					if unreserved[unhex(got[i+1])<<4|unhex(got[i+2])] {
						t.Fatalf("%+v: normalize(%q) = %q: unreserved character left encoded", r, in, got)
					}
				} else if !pathChar[c] {
					t.Fatalf("%+v: normalize(%q) = %q: byte %q not allowed", r, in, got, c)
				}
			}
			if r.merge && r.escaped != EscapedSlashesKeep {
				if want, have := pathpkg.Clean("/"+decode(r, in)), pathpkg.Clean(decode(r, got)); want != have {
					t.Fatalf("%+v: normalize(%q) = %q, which means %q; path.Clean of the input: %q", r, in, got, have, want)
				}
			}
		}
	})
}

// FuzzProxyHandler sends raw request bytes, parsed by http.ReadRequest as a
// server would, through the proxy's handler: whatever they hold, an
// upstream receives only paths under its route's prefix (read the most
// lenient way: every escape decoded once, backslashes as slashes,
// dot-segments resolved; and read as a servlet container does, with each
// segment's ";" parameters stripped first), only the host its route
// names, and a host outside the config receives nothing.
func FuzzProxyHandler(f *testing.F) {
	var mu sync.Mutex
	var violations []string
	violate := func(format string, args ...any) {
		mu.Lock()
		violations = append(violations, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	// inside reads p the most lenient way, and the way a servlet
	// container does (each segment's ";" parameters stripped first).
	inside := func(p, prefix string) bool {
		c := pathpkg.Clean(decodeAll(p))
		segs := strings.Split(p, "/")
		for i, seg := range segs {
			segs[i], _, _ = strings.Cut(seg, ";")
		}
		servlet := pathpkg.Clean(decodeAll(strings.Join(segs, "/")))
		return strings.HasPrefix(c+"/", prefix) && strings.HasPrefix(servlet+"/", prefix)
	}
	serve := func(name, prefix, host string) *httptest.Server {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			raw := r.URL.EscapedPath()
			if !strings.HasPrefix(raw, prefix) || !inside(raw, prefix) {
				violate("%s received path %q (%q), outside %s", name, r.RequestURI, r.URL.Path, prefix)
			}
			if host != "" {
				h := r.Host
				if hh, _, err := net.SplitHostPort(h); err == nil {
					h = hh
				}
				if h = strings.ToLower(strings.TrimSuffix(h, ".")); h != host {
					violate("%s received host %q, want %q", name, r.Host, host)
				}
			}
			io.Copy(io.Discard, r.Body)
		}))
		f.Cleanup(s.Close)
		return s
	}
	pub := serve("public", "/public/", "")
	api := serve("api", "/v1/", "api.example.com")
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		violate("unconfigured host received %s %q", r.Method, r.RequestURI)
	}))
	f.Cleanup(evil.Close)
	evilHost := strings.TrimPrefix(evil.URL, "http://")

	var handlers []http.Handler
	for _, paths := range []string{"", "paths: {escaped_slashes: unescape, merge_slashes: false}"} {
		cfg, err := Parse("f.yaml", []byte(fmt.Sprintf(`
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: pub, urls: [%q]}, {name: api, urls: [%q]}]
routes:
  - {name: public, path_prefix: /public/, upstream: pub, policy: {hedge: false}}
  - {name: api, host: api.example.com, path_prefix: /v1/, upstream: api, preserve_host: true}
%s
`, pub.URL, api.URL, paths)))
		if err != nil {
			f.Fatal(err)
		}
		s, err := New(cfg, discardLogger())
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() {
			s.router.Load().closeIdle()
			s.base.CloseIdleConnections()
		})
		handlers = append(handlers, s.Handler())
	}

	for _, target := range []string{
		"/public/x", "/public/../private/x", "/public/%2e%2e/private/x", "/public/%2E%2E/private/x",
		"/public/..%2fprivate/x", "/public/./../private/x", "/public/..\\private", "/public//../../x",
		"http://" + evilHost + "/public/x", "//" + evilHost + "/public/x", evilHost, "*",
		"/v1/../public/x", "/public/%252e%252e/x", "/public/.%2e%5c..%2f",
		"/public/..;/private/x", "/public/%2e%2e;/private/x", "/public/..;x=1/private/x",
		"/public/x/..;/..;/private/x", "/public/..%3b/x", "/public;x/../private", "/public/.;/..;a%2f",
	} {
		f.Add("GET " + target + " HTTP/1.1\r\nHost: app.test\r\n\r\n")
	}
	f.Add("GET /v1/x HTTP/1.1\r\nHost: API.example.com.:80\r\n\r\n")
	f.Add("GET /v1/x HTTP/1.1\r\nHost: " + evilHost + "\r\n\r\n")
	f.Add("CONNECT " + evilHost + " HTTP/1.1\r\nHost: " + evilHost + "\r\n\r\n")
	f.Add("POST /public/a HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
	f.Add("GET /public/a HTTP/1.1\r\nHost: api.example.com\r\nX-Forwarded-Host: " + evilHost + "\r\n\r\n")

	f.Fuzz(func(t *testing.T, raw string) {
		for _, h := range handlers {
			req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw)))
			if err != nil {
				return
			}
			req.RemoteAddr = "192.0.2.1:1234"
			h.ServeHTTP(httptest.NewRecorder(), req)
		}
		mu.Lock()
		v := violations
		violations = nil
		mu.Unlock()
		if len(v) > 0 {
			t.Fatalf("request %q: %s", raw, strings.Join(v, "; "))
		}
	})
}

// paths.semicolons takes params, reject or data, and nothing else.
func TestParseSemicolons(t *testing.T) {
	const cfg = `
listeners: [{listen: ":8080"}]
upstreams: [{name: u, urls: ["http://h:1"]}]
routes: [{name: r, upstream: u}]
paths: {semicolons: %s}
`
	for _, v := range []string{"params", "reject", "data", `""`} {
		if _, err := Parse("c.yaml", []byte(fmt.Sprintf(cfg, v))); err != nil {
			t.Errorf("semicolons: %s: %v", v, err)
		}
	}
	_, err := Parse("c.yaml", []byte(fmt.Sprintf(cfg, "strip")))
	if want := `c.yaml:5: paths.semicolons: want params, reject or data, got "strip"`; err == nil || err.Error() != want {
		t.Errorf("semicolons: strip: %v, want %s", err, want)
	}
}
