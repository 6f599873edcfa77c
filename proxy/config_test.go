package proxy

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tailcut/tailcut/budget"
)

const validConfig = `
listeners:
  - name: main
    listen: 127.0.0.1:8080
admin:
  listen: 127.0.0.1:9901
log:
  format: json
  level: debug
shutdown_timeout: 5s
upstreams:
  - name: api
    urls: [http://127.0.0.1:9001, "http://127.0.0.1:9002/base"]
routes:
  - name: api
    path_prefix: /api/
    upstream: api
    policy:
      quantile: 0.9
      max_hedges: 2
      budget: 5%
      budget_burst: 20
      warmup_delay: 20ms
      max_delay: 1s
      methods: [PUT]
      replay_limit: 1MiB
      first_byte: true
      timeout: 3s
  - name: catchall
    host: "*.example.com"
    upstream: api
    policy:
      hedge: false
      replay_limit: "off"
`

func TestParseValid(t *testing.T) {
	c, err := Parse("t.yaml", []byte(validConfig))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Listeners) != 1 || c.Listeners[0].Listen != "127.0.0.1:8080" || c.adminListen() != "127.0.0.1:9901" {
		t.Errorf("listeners %+v admin %q", c.Listeners, c.adminListen())
	}
	if c.Log.Format != "json" || c.shutdownTimeout() != 5*time.Second {
		t.Errorf("log %+v shutdown %v", c.Log, c.shutdownTimeout())
	}
	p := c.Routes[0].Policy
	if p.Quantile != 0.9 || p.MaxHedges != 2 || p.Budget != 0.05 || p.BudgetBurst != 20 ||
		p.WarmupDelay != 20*time.Millisecond || p.MaxDelay != time.Second || p.ReplayLimit != 1<<20 ||
		!p.FirstByte || p.Timeout != 3*time.Second || len(p.Methods) != 1 || !p.Hedging() {
		t.Errorf("policy %+v", p)
	}
	if q := c.Routes[1].Policy; q.Hedging() || q.ReplayLimit != -1 {
		t.Errorf("catchall policy %+v", q)
	}
}

// A merge key (<<: *anchor) is YAML, not an unknown field.
func TestParseMergeKey(t *testing.T) {
	_, err := Parse("t.yaml", []byte(`
listeners: [{listen: ":8080"}]
upstreams: [{name: u, urls: ["http://10.0.0.1:80"]}]
x-policy: &p {max_hedges: 2}
routes:
  - name: r
    upstream: u
    policy:
      <<: *p
      budget: 5%
`))
	if err == nil {
		t.Fatal("x-policy accepted: want an unknown-field error for it alone")
	}
	if msg := err.Error(); strings.Count(msg, "\n") != 0 || !strings.Contains(msg, "t.yaml:4: x-policy: unknown field") {
		t.Errorf("error %q: want only x-policy's", msg)
	}
	c, err := Parse("t.yaml", []byte(`
listeners: [{listen: ":8080"}]
upstreams: [{name: u, urls: ["http://10.0.0.1:80"]}]
routes:
  - &r {name: r, upstream: u, path_prefix: /a/, policy: {max_hedges: 2}}
  - <<: *r
    name: s
    path_prefix: /b/
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.Routes[1].Policy.MaxHedges != 2 || c.Routes[1].Upstream != "u" {
		t.Errorf("merged route %+v", c.Routes[1])
	}
}

func TestParseDefaults(t *testing.T) {
	c, err := Parse("t.yaml", []byte(`
listeners: [{listen: ":8080"}]
upstreams: [{name: u, urls: ["http://10.0.0.1:80"]}]
routes: [{name: r, upstream: u}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if c.adminListen() != DefaultAdminListen || c.shutdownTimeout() != DefaultShutdownTimeout {
		t.Errorf("admin %q shutdown %v, want the defaults", c.adminListen(), c.shutdownTimeout())
	}
	if !c.Routes[0].Policy.Hedging() {
		t.Error("hedging off by default")
	}
}

// Every error names the file, the line and the field.
func TestParseErrors(t *testing.T) {
	for _, c := range []struct {
		name, yaml string
		want       []string
	}{
		{"unknown field", `
listeners: [{listen: ":8080"}]
upstreams: [{name: u, urls: ["http://h:1"]}]
routes:
  - name: r
    upstream: u
    policy:
      quantle: 0.9
`, []string{"c.yaml:8: routes[0].policy.quantle: unknown field: did you mean quantile?"}},
		{"bad quantile", `
listeners: [{listen: ":8080"}]
upstreams: [{name: u, urls: ["http://h:1"]}]
routes:
  - name: r
    upstream: u
    policy:
      max_hedges: 2
      quantile: 1.5
`, []string{"c.yaml:9: routes[0].policy.quantile: must be in (0, 1), got 1.5"}},
		{"unknown upstream", `
listeners: [{listen: ":8080"}]
upstreams: [{name: u, urls: ["http://h:1"]}]
routes:
  - name: r
    upstream: nope
`, []string{`c.yaml:6: routes[0].upstream: no upstream named "nope"`}},
		{"bad url", `
listeners: [{listen: ":8080"}]
upstreams:
  - name: u
    urls:
      - http://h:1
      - ftp://h:2
routes: [{name: r, upstream: u}]
`, []string{"c.yaml:7: upstreams[0].urls[1]:", "ftp://h:2"}},
		{"bad duration", `
listeners: [{listen: ":8080"}]
upstreams: [{name: u, urls: ["http://h:1"]}]
routes:
  - name: r
    upstream: u
    policy: {max_delay: soon}
`, []string{`c.yaml:7: routes[0].policy.max_delay: want a duration such as 250ms or 1m30s, got "soon"`}},
		{"typos, types and ranges together", `
listeners: [{listen: ":8080"}]
upstreams: [{name: u, urls: ["127.0.0.1:19001"]}]
routes:
  - name: r
    upstream: nope
    policy:
      quantle: 0.9
      max_delay: soon
      budget: lots
      max_hedges: 9
      replay_limit: 12 parsecs
`, []string{
			`c.yaml:3: upstreams[0].urls[0]: "127.0.0.1:19001" has no scheme: write http://127.0.0.1:19001 (or https://)`,
			`c.yaml:6: routes[0].upstream: no upstream named "nope"`,
			"c.yaml:8: routes[0].policy.quantle: unknown field: did you mean quantile?",
			`c.yaml:9: routes[0].policy.max_delay: want a duration such as 250ms or 1m30s, got "soon"`,
			`c.yaml:10: routes[0].policy.budget: want a fraction such as 0.1 or 10%, got "lots"`,
			"c.yaml:11: routes[0].policy.max_hedges: must be in [1, 4] (unset means 1), got 9",
			`c.yaml:12: routes[0].policy.replay_limit: want a size such as 65536, 64KiB or 1MiB, got "12 parsecs"`,
		}},
		{"unknown field far from any", `
listeners: [{listen: ":8080", colour: blue}]
upstreams: [{name: u, urls: ["http://h:1"]}]
routes: [{name: r, upstream: u}]
`, []string{"c.yaml:2: listeners[0].colour: unknown field: want one of ", "listen, max_in_flight, min_progress, name, shed"}},
		{"bad budget", `
listeners: [{listen: ":8080"}]
upstreams: [{name: u, urls: ["http://h:1"]}]
routes:
  - name: r
    upstream: u
    policy:
      budget: 150%
`, []string{"c.yaml:8: routes[0].policy.budget: must be above 0 and at most 1 (0.1 or 10%; at most 100%), got 1.5"}},
		{"bad size", `
listeners: [{listen: ":8080"}]
upstreams: [{name: u, urls: ["http://h:1"]}]
routes:
  - name: r
    upstream: u
    policy:
      replay_limit: 12 parsecs
`, []string{"c.yaml:8:", "12 parsecs"}},
		{"several at once", `
listeners: [{listen: "8080"}]
upstreams: [{name: u, urls: []}]
routes:
  - name: r
    upstream: u
    path_prefix: api
    policy: {max_hedges: 9, methods: [put], min_delay: 2s, max_delay: 1s}
  - name: r
    upstream: u
`, []string{
			"c.yaml:2: listeners[0].listen: want host:port",
			"c.yaml:3: upstreams[0].urls: at least one replica URL",
			"c.yaml:7: routes[0].path_prefix: must start with /",
			"c.yaml:8: routes[0].policy.max_hedges: must be in [1, 4] (unset means 1), got 9",
			`c.yaml:8: routes[0].policy.methods[0]: want an upper-case method such as PUT, got "put"`,
			"c.yaml:8: routes[0].policy.min_delay: 2s exceeds max_delay 1s",
			`c.yaml:9: routes[1].name: route "r" defined twice`,
		}},
		{"same match twice", `
listeners: [{listen: ":8080"}]
upstreams: [{name: u, urls: ["http://h:1"]}]
routes:
  - {name: a, upstream: u, path_prefix: /x}
  - {name: b, upstream: u, path_prefix: /x}
`, []string{"c.yaml:6: routes[1].path_prefix: matches the same requests as routes[0]"}},
		{"admin on a traffic port", `
listeners: [{listen: "127.0.0.1:8080"}]
admin: {listen: "127.0.0.1:8080"}
upstreams: [{name: u, urls: ["http://h:1"]}]
routes: [{name: r, upstream: u}]
`, []string{"c.yaml:3: admin.listen: address"}},
		{"shed limits", `
listeners:
  - listen: ":8080"
    shed: {hedge_limit: 10, hard_limit: 5, retry_after: -1s}
upstreams: [{name: u, urls: ["http://h:1"]}]
routes: [{name: r, upstream: u}]
`, []string{"c.yaml:4: listeners[0].shed.hard_limit: 5 is below hedge_limit 10", "c.yaml:4: listeners[0].shed.retry_after: must not be negative"}},
		{"paths", `
listeners: [{listen: ":8080"}]
upstreams: [{name: u, urls: ["http://h:1"]}]
routes:
  - {name: a, upstream: u, path_prefix: "/x/../y/"}
  - {name: b, upstream: u, path_prefix: "/a%2fb/"}
  - {name: c, upstream: u, path_prefix: "/%7euser//"}
paths: {escaped_slashes: decode}
`, []string{
			`c.yaml:8: paths.escaped_slashes: want reject, keep or unescape, got "decode"`,
			`c.yaml:5: routes[0].path_prefix: "/x/../y/" is not in normal form: write "/y/"`,
			`c.yaml:6: routes[1].path_prefix: encoded slash or backslash in path: "/a%2fb/"`,
			`c.yaml:7: routes[2].path_prefix: "/%7euser//" is not in normal form: write "/~user/"`,
		}},
		{"max_in_flight", `
listeners:
  - {listen: ":8080", max_in_flight: -2}
  - {listen: ":8081", max_in_flight: 100, shed: {hard_limit: 200}}
upstreams: [{name: u, urls: ["http://h:1"]}]
routes: [{name: r, upstream: u}]
`, []string{
			"c.yaml:3: listeners[0].max_in_flight: want a positive bound, 0 for the default (2048) or -1 for none, got -2",
			"c.yaml:4: listeners[1].shed.hard_limit: 200 is above max_in_flight 100",
		}},
		{"admission and tied", `
listeners:
  - {listen: ":8080", admission: {limit: -1}}
  - {listen: ":8081", max_in_flight: 10, admission: {limit: 20}}
upstreams: [{name: u, urls: ["http://h:1"]}]
routes:
  - {name: a, upstream: u, policy: {tied: -1ms}}
  - {name: b, upstream: u, policy: {tied: 0s, hedge: false}}
`, []string{
			"c.yaml:3: listeners[0].admission.limit: must not be negative (0 means no bound), got -1",
			"c.yaml:4: listeners[1].admission.limit: 20 is above max_in_flight 10",
			"c.yaml:7: routes[0].policy.tied: must not be negative (0s sends the twin at once), got -1ms",
			"c.yaml:8: routes[1].policy.tied: sends a twin, which hedge: false forbids",
		}},
		{"empty", ``, []string{"c.yaml: empty config"}},
		{"nothing", `log: {format: json}`, []string{"c.yaml:1: listeners: at least one", "upstreams: at least one", "routes: at least one"}},
		{"not yaml", "listeners: [", []string{"c.yaml:"}},
		{"wrong type", `listeners: 3`, []string{`c.yaml:1: listeners: want a list, got "3"`}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("c.yaml", []byte(c.yaml))
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			// In the order of the file's lines.
			last := 0
			for _, l := range strings.Split(err.Error(), "\n") {
				num, _, _ := strings.Cut(strings.TrimPrefix(l, "c.yaml:"), ":")
				if n, e := strconv.Atoi(num); e == nil {
					if n < last {
						t.Errorf("line %d reported after line %d:\n%v", n, last, err)
					}
					last = n
				}
			}
			// The config's words, never Go's.
			for _, goWord := range []string{"proxy.", "time.Duration", "cannot unmarshal", "!!"} {
				if strings.Contains(err.Error(), goWord) {
					t.Errorf("error speaks Go (%q):\n%v", goWord, err)
				}
			}
		})
	}
}

// budget: 0% is not a silent 10 %: it is an error that names the field
// and says how to turn hedging off. Unset still means 10 %.
func TestParseRejectsZeroBudget(t *testing.T) {
	for _, b := range []string{"0%", "0", "0.0"} {
		_, err := Parse("c.yaml", []byte(`
listeners: [{listen: ":8080"}]
upstreams: [{name: u, urls: ["http://h:1"]}]
routes:
  - name: r
    upstream: u
    policy:
      budget: `+b+"\n"))
		want := "c.yaml:8: routes[0].policy.budget: must be above 0 (unset means 10%); to turn hedging off, write hedge: false"
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("budget: %s: error %v, want %q", b, err, want)
		}
	}
	c, err := Parse("c.yaml", []byte(`
listeners: [{listen: ":8080"}]
upstreams: [{name: u, urls: ["http://h:1"]}]
routes: [{name: r, upstream: u, policy: {max_hedges: 1}}]
`))
	if err != nil {
		t.Fatal(err)
	}
	p, err := newPolicy(c.Routes[0], discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	w, ok := p.Config().Budget.(*budget.Windowed)
	if !ok {
		t.Fatalf("budget %T, want *budget.Windowed", p.Config().Budget)
	}
	if ratio, _, _ := w.Settings(); ratio != 0.1 {
		t.Errorf("unset budget: ratio %v, want 0.1", ratio)
	}
	// A burst asks for the bucket of that fixed burst.
	rc := c.Routes[0]
	rc.Policy.BudgetBurst = 20
	if p, err = newPolicy(rc, discardLogger()); err != nil {
		t.Fatal(err)
	}
	r, ok := p.Config().Budget.(*budget.Ratio)
	if !ok {
		t.Fatalf("budget_burst 20: budget %T, want *budget.Ratio", p.Config().Budget)
	}
	if ratio, burst, _ := r.Limits(); ratio != 0.1 || burst != 20 {
		t.Errorf("budget_burst 20: ratio %v, burst %v, want 0.1 and 20", ratio, burst)
	}
}

// Every listener has a bound on requests in flight unless it says -1.
func TestListenerMaxInFlightDefault(t *testing.T) {
	c, err := Parse("c.yaml", []byte(`
listeners:
  - {listen: ":8080"}
  - {listen: ":8081", max_in_flight: 10}
  - {listen: ":8082", max_in_flight: -1}
  - {listen: ":8083", shed: {hard_limit: 5000}}
  - {listen: ":8084", shed: {hard_limit: 100}}
upstreams: [{name: u, urls: ["http://h:1"]}]
routes: [{name: r, upstream: u}]
`))
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{DefaultMaxInFlight, 10, 0, 5000, DefaultMaxInFlight} {
		if got := c.Listeners[i].maxInFlight(); got != want {
			t.Errorf("listeners[%d]: bound %d, want %d", i, got, want)
		}
	}
}

func TestLoadFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "tailcut.yaml")
	if err := os.WriteFile(p, []byte(validConfig), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if c.file != p {
		t.Errorf("file %q", c.file)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("no error for a missing file")
	}
}

// The example config shipped in examples/proxy is valid.
func TestExampleConfigValid(t *testing.T) {
	if _, err := Load("../examples/proxy/tailcut.yaml"); err != nil {
		t.Fatal(err)
	}
}

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{"0": 0, "65536": 65536, "64KiB": 64 << 10, "64 kb": 64 << 10, "1MiB": 1 << 20, "2G": 2 << 30, "off": -1, "OFF": -1} {
		if got, err := ParseByteSize(in); err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "KiB", "-1", "1.5MiB", "1TB", "99999999999999999999", "9999999999999G"} {
		if got, err := ParseByteSize(in); err == nil {
			t.Errorf("ParseByteSize(%q) = %d, want an error", in, got)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(validConfig)
	f.Add("listeners: [{listen: \":8080\"}]\nupstreams: [{name: u, urls: [\"http://h:1\"]}]\nroutes: [{name: r, upstream: u}]\n")
	f.Add("routes: [{name: r, policy: {budget: 10%, replay_limit: 1KiB}}]")
	f.Add("listeners: [{listen: \":8080\"}]\nupstreams: [{name: u, urls: [\"http://h:1\"]}]\nroutes: [{name: r, upstream: u}]\nidempotency: {store: redis, redis: {addrs: [\"h:1\"]}, ttl: 1h, max_body: 1KiB}\n")
	f.Add("listeners: &a [*a]")
	f.Add("listeners: [{listen: \":8080\", colour: blue}]\nupstreams: [{name: u, urls: [\"127.0.0.1:1\"]}]\nroutes: [{name: r, upstream: u, policy: {quantle: 0.9, max_delay: soon, budget: lots}}]\n")
	f.Add("listeners: [{listen: \":8080\"}]\nupstreams: [{name: u, urls: [\"http://h:1\"]}]\nx: &m {name: r, upstream: u, colour: 1}\nroutes: [*m]\n")
	f.Add("")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Parse("f.yaml", []byte(s))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "f.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		// A config that parses is one the server can be built from.
		if len(c.Listeners) == 0 || len(c.Routes) == 0 || len(c.Upstreams) == 0 {
			t.Fatalf("accepted a config without listeners, routes or upstreams: %q", s)
		}
		pools := map[string]bool{}
		for _, u := range c.Upstreams {
			pools[u.Name] = true
		}
		for _, r := range c.Routes {
			if !pools[r.Upstream] {
				t.Fatalf("accepted route %q to unknown upstream %q", r.Name, r.Upstream)
			}
			if _, err := newPolicy(r, discardLogger()); err != nil {
				t.Fatalf("accepted a policy tailcut rejects: %v", err)
			}
		}
		if c.Idempotency != nil {
			s, err := New(c, discardLogger())
			if err != nil {
				t.Fatalf("accepted an idempotency section New rejects: %v", err)
			}
			if s.idemRedis != nil {
				s.idemRedis.Close()
			}
		}
	})
}

// A route whose policy sets no max_hedges hedges at most once, as
// Policy.MaxHedges and the example config say (DefaultMaxHedges), and one
// that sets it gets what it set.
func TestRouteMaxHedgesDefault(t *testing.T) {
	s := newServer(t, `
listeners: [{listen: "127.0.0.1:0"}]
upstreams: [{name: u, urls: ["http://127.0.0.1:1"]}]
routes:
  - {name: zero, upstream: u, path_prefix: /a/}
  - {name: three, upstream: u, path_prefix: /b/, policy: {max_hedges: 3}}
`)
	rt := s.router.Load()
	if got := rt.byName["zero"].policy.Config().MaxHedges; got != 1 {
		t.Errorf("zero-config route: MaxHedges %d, want the documented default 1", got)
	}
	if got := rt.byName["three"].policy.Config().MaxHedges; got != 3 {
		t.Errorf("max_hedges: 3: MaxHedges %d", got)
	}
}
