package hedgegrpc

import (
	"maps"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tailcut/tailcut"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// The examples of gRFC A6 (A6-client-retries.md), as written there.
const (
	a6Hedging = `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}],
		"hedgingPolicy": {
			"maxAttempts": 4,
			"hedgingDelay": ".5s",
			"nonFatalStatusCodes": ["UNAVAILABLE", "INTERNAL", "ABORTED"]
		}}]}`
	a6HedgingAtOnce = `{"methodConfig": [{"name": [{"service": "grpc.testing.TestService"}],
		"hedgingPolicy": {
			"maxAttempts": 4,
			"hedgingDelay": "0s",
			"nonFatalStatusCodes": ["UNAVAILABLE", "INTERNAL", "ABORTED"]
		}}]}`
	a6Throttling = `{"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.1}}`
)

func TestParseA6Examples(t *testing.T) {
	sc := mustConfig(t, a6Hedging)
	mc, ok := sc.Method("/grpc.testing.TestService/UnaryCall")
	if !ok || mc.Hedging == nil {
		t.Fatal("no hedging policy for a method of the named service")
	}
	hp := mc.Hedging
	want := []codes.Code{codes.Unavailable, codes.Internal, codes.Aborted}
	if hp.MaxAttempts != 4 || hp.Delay != 500*time.Millisecond || hp.Adaptive || !slices.Equal(hp.NonFatalCodes, want) {
		t.Errorf("got %+v, want maxAttempts 4, delay 500ms, fixed, codes %v", hp, want)
	}

	hp = mustHedging(t, mustConfig(t, a6HedgingAtOnce), "/grpc.testing.TestService/UnaryCall")
	if hp.Delay != 0 || hp.Adaptive {
		t.Errorf(`"0s": got delay %v adaptive %v, want 0 and fixed (all attempts at once)`, hp.Delay, hp.Adaptive)
	}

	sc = mustConfig(t, a6Throttling)
	if sc.Throttling == nil || sc.Throttling.MaxTokens != 10 || sc.Throttling.TokenRatio != 0.1 {
		t.Errorf("throttling %+v, want {10 0.1}", sc.Throttling)
	}
}

func mustHedging(t *testing.T, sc *ServiceConfig, method string) *HedgingPolicy {
	t.Helper()
	mc, ok := sc.Method(method)
	if !ok || mc.Hedging == nil {
		t.Fatalf("%s: no hedging policy", method)
	}
	return mc.Hedging
}

func TestParseFullServiceConfig(t *testing.T) {
	// A config a grpc-java user might already have: other fields, a retry
	// policy for one method and hedging for the rest of the service,
	// snake_case names, and a default entry.
	sc := mustConfig(t, `{
		"loadBalancingConfig": [{"round_robin": {}}],
		"methodConfig": [
			{"name": [{"service": "shop.Cart", "method": "Add"}],
			 "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.1s", "maxBackoff": "1s",
			                 "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}},
			{"name": [{"service": "shop.Cart"}, {"service": "shop.Catalog", "method": "Get"}],
			 "timeout": "2s",
			 "hedging_policy": {"max_attempts": 9, "non_fatal_status_codes": [14, "ABORTED"]}},
			{"name": [{}], "waitForReady": true}
		],
		"retry_throttling": {"max_tokens": 100, "token_ratio": 0.1234}
	}`)
	for _, tc := range []struct {
		method   string
		hedged   bool
		attempts int
	}{
		{"/shop.Cart/Add", false, 0},     // its own entry: a retry policy
		{"/shop.Cart/Get", true, 5},      // service-wide entry, maxAttempts capped at 5
		{"/shop.Catalog/Get", true, 5},   // named method of another service
		{"/shop.Catalog/List", false, 0}, // default entry: no hedging
		{"/other.Svc/M", false, 0},
	} {
		mc, ok := sc.Method(tc.method)
		if !ok {
			t.Errorf("%s: no method config, want the default entry at least", tc.method)
			continue
		}
		if (mc.Hedging != nil) != tc.hedged {
			t.Errorf("%s: hedged %v, want %v", tc.method, mc.Hedging != nil, tc.hedged)
			continue
		}
		if tc.hedged {
			hp := mc.Hedging
			if hp.MaxAttempts != tc.attempts || !hp.Adaptive || !slices.Equal(hp.NonFatalCodes, []codes.Code{codes.Unavailable, codes.Aborted}) {
				t.Errorf("%s: %+v", tc.method, hp)
			}
		}
	}
	if th := sc.Throttling; th == nil || th.MaxTokens != 100 || th.TokenRatio != 0.123 {
		t.Errorf("throttling %+v, want {100 0.123} (three decimals kept)", th)
	}
}

func TestMethodPrecedence(t *testing.T) {
	sc := mustConfig(t, `{"methodConfig": [
		{"name": [{}], "hedgingPolicy": {"maxAttempts": 2}},
		{"name": [{"service": "s.S"}], "hedgingPolicy": {"maxAttempts": 3}},
		{"name": [{"service": "s.S", "method": "M"}], "hedgingPolicy": {"maxAttempts": 4}}]}`)
	for method, want := range map[string]int{"/s.S/M": 4, "/s.S/N": 3, "/t.T/M": 2, "weird": 2} {
		if got := mustHedging(t, sc, method).MaxAttempts; got != want {
			t.Errorf("%s: maxAttempts %d, want %d", method, got, want)
		}
	}
	if _, ok := mustConfig(t, `{}`).Method("/s.S/M"); ok {
		t.Error("empty config: a method config was found")
	}
	var nilSC *ServiceConfig
	if _, ok := nilSC.Method("/s.S/M"); ok {
		t.Error("nil config: a method config was found")
	}
}

// Durations are read as proto3 JSON reads google.protobuf.Duration
// (protojson): a sign, decimal seconds without leading zeros, at most
// nine fractional digits, the suffix "s".
func TestParseDuration(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"0s", 0}, {"1s", time.Second}, {".5s", 500 * time.Millisecond}, {"0.5s", 500 * time.Millisecond},
		{"1.000340012s", time.Second + 340012}, {"-2s", -2 * time.Second}, {"3.s", 3 * time.Second},
		{"0.000000001s", 1}, {"+1s", time.Second}, {"-.25s", -250 * time.Millisecond}, {"-0s", 0},
		{"9223372035.999999999s", 9223372035*time.Second + 999999999},
	} {
		got, err := parseDuration(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("parseDuration(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"", "s", "1", "1ms", "1.2.3s", "1.0000000001s", "--1s", "+-1s", "-s", ".s", "1e3s",
		"99999999999999s", "9223372036s", "-9223372036s", " 1s", "1s ", "0x1s", "01s", "00.5s", "1.+5s", "1.-5s", "1S", "١s"} {
		if d, err := parseDuration(in); err == nil {
			t.Errorf("parseDuration(%q) = %v, want an error", in, d)
		}
	}
}

// gRFC A6: status codes in the integer form or the case-insensitive
// string form ([14], ["UNAVAILABLE"], ["unavailable"]). grpc-go's and
// grpc-java's parsers take only the upper-case name; a config they accept
// is accepted here too.
func TestParseCodesCaseInsensitive(t *testing.T) {
	hp := mustHedging(t, mustConfig(t, `{"methodConfig": [{"name": [{"service": "a.B"}], "hedgingPolicy": {"maxAttempts": 2,
		"nonFatalStatusCodes": ["unavailable", "Internal", "ABORTED", "resource_exhausted", 4, 8.0, "cancelled"]}}]}`), "/a.B/M")
	want := []codes.Code{codes.Unavailable, codes.Internal, codes.Aborted, codes.ResourceExhausted, codes.DeadlineExceeded,
		codes.ResourceExhausted, codes.Canceled}
	if !slices.Equal(hp.NonFatalCodes, want) {
		t.Errorf("codes %v, want %v", hp.NonFatalCodes, want)
	}
}

// gRFC A6: "Decimal places beyond 3 are ignored. (eg. 0.5466 is treated
// as 0.546.)" — truncated on the number as written, not rounded, and not
// on its nearest float64.
func TestTokenRatioTruncated(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
	}{
		{"0.5466", 0.546}, {"0.1", 0.1}, {"0.1239", 0.123}, {"4.35", 4.35}, {"0.0019", 0.001}, {"5.466e-1", 0.546},
		{"0.12399999999999999999", 0.123}, {"1", 1}, {"999.9999", 999.999}, {"1000", 1000}, {"5000", 1000},
	} {
		sc, err := ParseServiceConfig([]byte(`{"retryThrottling": {"maxTokens": 10, "tokenRatio": ` + tc.in + `}}`))
		if err != nil {
			t.Errorf("tokenRatio %s: %v", tc.in, err)
			continue
		}
		if got := sc.Throttling.TokenRatio; got != tc.want {
			t.Errorf("tokenRatio %s = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestParseErrorsNameTheField(t *testing.T) {
	hedge := func(policy string) string {
		return `{"methodConfig": [{"name": [{}]}, {"name": [{"service": "a.B"}]}, {"name": [{"service": "c.D"}], "hedgingPolicy": ` + policy + `}]}`
	}
	for _, tc := range []struct {
		name, js, want string
	}{
		{"not JSON", `{"methodConfig": [`, "service config: invalid JSON"},
		{"not an object", `[]`, "service config: must be a JSON object"},
		{"null", `null`, "service config: must be a JSON object"},
		{"trailing data", `{} {}`, "service config: invalid JSON"},
		{"methodConfig not array", `{"methodConfig": {}}`, "methodConfig: must be a JSON array"},
		{"methodConfig entry not object", `{"methodConfig": [1]}`, "methodConfig[0]: must be a JSON object"},
		{"name not array", `{"methodConfig": [{"name": "x"}]}`, "methodConfig[0].name: must be a JSON array"},
		{"name entry not object", `{"methodConfig": [{"name": ["x"]}]}`, "methodConfig[0].name[0]: must be a JSON object"},
		{"service not string", `{"methodConfig": [{"name": [{"service": 1}]}]}`, "methodConfig[0].name[0].service: must be a string"},
		{"method without service", `{"methodConfig": [{"name": [{"service": "a.B"}, {"method": "M"}]}]}`, "methodConfig[0].name[1]: a method (\"M\") needs a service"},
		{"duplicate name", `{"methodConfig": [{"name": [{"service": "a.B"}]}, {"name": [{"service": "a.B", "method": ""}]}]}`, "methodConfig[1].name[0]: duplicate name"},
		{"duplicate default", `{"methodConfig": [{"name": [{}, {"service": ""}]}]}`, "methodConfig[0].name[1]: duplicate name"},
		{"both policies", `{"methodConfig": [{"name": [{}], "retryPolicy": {}, "hedgingPolicy": {"maxAttempts": 2}}]}`, "methodConfig[0]: retryPolicy and hedgingPolicy are mutually exclusive"},
		{"hedgingPolicy not object", hedge(`[]`), "methodConfig[2].hedgingPolicy: must be a JSON object"},
		{"maxAttempts missing", hedge(`{}`), "methodConfig[2].hedgingPolicy.maxAttempts: is required"},
		{"maxAttempts 1", hedge(`{"maxAttempts": 1}`), "methodConfig[2].hedgingPolicy.maxAttempts: must be at least 2, got 1"},
		{"maxAttempts negative", hedge(`{"maxAttempts": -3}`), "methodConfig[2].hedgingPolicy.maxAttempts: must be at least 2, got -3"},
		{"maxAttempts fractional", hedge(`{"maxAttempts": 2.5}`), "methodConfig[2].hedgingPolicy.maxAttempts: must be an integer"},
		{"maxAttempts string", hedge(`{"maxAttempts": "4"}`), "methodConfig[2].hedgingPolicy.maxAttempts: must be a number"},
		{"delay not string", hedge(`{"maxAttempts": 2, "hedgingDelay": 0.5}`), "methodConfig[2].hedgingPolicy.hedgingDelay: must be a duration string"},
		{"delay no unit", hedge(`{"maxAttempts": 2, "hedgingDelay": "500"}`), "methodConfig[2].hedgingPolicy.hedgingDelay: malformed duration"},
		{"delay ms", hedge(`{"maxAttempts": 2, "hedgingDelay": "500ms"}`), "methodConfig[2].hedgingPolicy.hedgingDelay: malformed duration"},
		{"delay negative", hedge(`{"maxAttempts": 2, "hedgingDelay": "-1s"}`), "methodConfig[2].hedgingPolicy.hedgingDelay: must not be negative"},
		{"delay leading zero", hedge(`{"maxAttempts": 2, "hedgingDelay": "01s"}`), "methodConfig[2].hedgingPolicy.hedgingDelay: malformed duration"},
		{"delay beyond time.Duration", hedge(`{"maxAttempts": 2, "hedgingDelay": "315576000000s"}`), "methodConfig[2].hedgingPolicy.hedgingDelay: duration \"315576000000s\" out of range"},
		{"codes not array", hedge(`{"maxAttempts": 2, "nonFatalStatusCodes": "UNAVAILABLE"}`), "methodConfig[2].hedgingPolicy.nonFatalStatusCodes: must be a JSON array"},
		{"unknown code", hedge(`{"maxAttempts": 2, "nonFatalStatusCodes": ["UNAVAILABLE", "BUSY"]}`), `methodConfig[2].hedgingPolicy.nonFatalStatusCodes[1]: unknown status code "BUSY"`},
		{"digits as a string", hedge(`{"maxAttempts": 2, "nonFatalStatusCodes": ["14"]}`), `nonFatalStatusCodes[0]: unknown status code "14"`},
		{"Go's spelling", hedge(`{"maxAttempts": 2, "nonFatalStatusCodes": ["Canceled"]}`), `nonFatalStatusCodes[0]: unknown status code "Canceled"`},
		{"non-ASCII fold", hedge(`{"maxAttempts": 2, "nonFatalStatusCodes": ["unavaılable"]}`), `nonFatalStatusCodes[0]: unknown status code "unavaılable"`},
		{"code OK", hedge(`{"maxAttempts": 2, "nonFatalStatusCodes": ["OK"]}`), "nonFatalStatusCodes[0]: OK cannot be a non-fatal status code"},
		{"code ok", hedge(`{"maxAttempts": 2, "nonFatalStatusCodes": ["ok"]}`), "nonFatalStatusCodes[0]: OK cannot be a non-fatal status code"},
		{"code 0", hedge(`{"maxAttempts": 2, "nonFatalStatusCodes": [0]}`), "nonFatalStatusCodes[0]: OK cannot be a non-fatal status code"},
		{"code negative", hedge(`{"maxAttempts": 2, "nonFatalStatusCodes": [-1]}`), "nonFatalStatusCodes[0]: status code -1 out of range"},
		{"code fractional", hedge(`{"maxAttempts": 2, "nonFatalStatusCodes": [14.5]}`), "nonFatalStatusCodes[0]: must be a status code name or number"},
		{"code out of range", hedge(`{"maxAttempts": 2, "nonFatalStatusCodes": [17]}`), "nonFatalStatusCodes[0]: status code 17 out of range"},
		{"code object", hedge(`{"maxAttempts": 2, "nonFatalStatusCodes": [{}]}`), "nonFatalStatusCodes[0]: must be a status code name or number"},
		{"throttling not object", `{"retryThrottling": 3}`, "retryThrottling: must be a JSON object"},
		{"maxTokens missing", `{"retryThrottling": {"tokenRatio": 0.1}}`, "retryThrottling.maxTokens: is required"},
		{"maxTokens zero", `{"retryThrottling": {"maxTokens": 0, "tokenRatio": 0.1}}`, "retryThrottling.maxTokens: must be in (0, 1000], got 0"},
		{"maxTokens too big", `{"retryThrottling": {"maxTokens": 1000.5, "tokenRatio": 0.1}}`, "retryThrottling.maxTokens: must be in (0, 1000]"},
		{"tokenRatio missing", `{"retryThrottling": {"maxTokens": 10}}`, "retryThrottling.tokenRatio: is required"},
		{"tokenRatio zero", `{"retryThrottling": {"maxTokens": 10, "tokenRatio": 0}}`, "retryThrottling.tokenRatio: must be greater than 0"},
		{"tokenRatio negative", `{"retryThrottling": {"maxTokens": 10, "tokenRatio": -1}}`, "retryThrottling.tokenRatio: must be greater than 0"},
		{"tokenRatio below a thousandth", `{"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.0004}}`, "retryThrottling.tokenRatio: must be at least 0.001"},
		{"tokenRatio truncated to zero", `{"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.0009999}}`, "retryThrottling.tokenRatio: must be at least 0.001 (decimals beyond three are dropped), got 0.0009999"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := ParseServiceConfig([]byte(tc.js))
			if err == nil {
				t.Fatalf("parsed %+v, want an error containing %q", sc, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "hedgegrpc: ") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParseAcceptsOddButValid(t *testing.T) {
	for _, js := range []string{
		`{}`,
		`{"methodConfig": null, "retryThrottling": null}`,
		`{"methodConfig": [{"hedgingPolicy": {"maxAttempts": 2}}]}`, // no name: skipped, as grpc-go does
		`{"methodConfig": [{"name": [{"service": "a.B"}], "hedgingPolicy": null, "retryPolicy": {"x": 1}}]}`,
		`{"methodConfig": [{"name": [{"service": "a.B"}], "hedgingPolicy": {"maxAttempts": 2.0, "nonFatalStatusCodes": []}}]}`,
		`{"methodConfig": [{"name": [{"service": "a.B"}], "hedgingPolicy": {"maxAttempts": 1e9, "nonFatalStatusCodes": [14]}}]}`,
		`{"retryThrottling": {"maxTokens": 1000, "tokenRatio": 5000}}`,
		`{"loadBalancingPolicy": "round_robin", "unknown": [1, 2, {"x": null}]}`,
	} {
		if _, err := ParseServiceConfig([]byte(js)); err != nil {
			t.Errorf("%s: %v", js, err)
		}
	}
	hp := mustHedging(t, mustConfig(t, `{"methodConfig": [{"name": [{"service": "a.B"}], "hedgingPolicy": {"maxAttempts": 2, "nonFatalStatusCodes": []}}]}`), "/a.B/M")
	if hp.NonFatalCodes == nil || len(hp.NonFatalCodes) != 0 {
		t.Errorf("an empty nonFatalStatusCodes list must stay empty and non-nil (every error final), got %#v", hp.NonFatalCodes)
	}
}

func FuzzParseServiceConfig(f *testing.F) {
	for _, s := range []string{
		a6Hedging, a6HedgingAtOnce, a6Throttling, `{}`, `null`, `[]`,
		`{"methodConfig": [{"name": [{"service": "a.B", "method": "C"}], "hedgingPolicy": {"maxAttempts": 3, "hedgingDelay": "1.5s", "nonFatalStatusCodes": [14]}}]}`,
		`{"methodConfig": [{"name": [{}], "hedging_policy": {"max_attempts": 7}}], "retry_throttling": {"max_tokens": 3, "token_ratio": 0.5}}`,
		`{"methodConfig": [{"name": [{"method": "x"}]}]}`,
		`{"retryThrottling": {"maxTokens": 1e308, "tokenRatio": 1e-308}}`,
		`{"methodConfig": [{"name": [{"service": "a.B"}], "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "+.25s", "nonFatalStatusCodes": ["unavailable", "Data_Loss", 16]}}]}`,
		`{"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.5466}}`,
		`{"retryThrottling": {"maxTokens": 10, "tokenRatio": 5.466E-1}}`,
		`{"retryThrottling": {"maxTokens": 10, "tokenRatio": 0.00000000000000000000000000001e+26}}`,
		`{"loadBalancingConfig": [{"round_robin": {}}], "methodConfig": []}`,
		`{"LOADBALANCINGPOLICY": "round_robin"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, js []byte) {
		sc, err := ParseServiceConfig(js)
		if err != nil {
			if sc != nil {
				t.Fatal("a config returned with an error")
			}
			if !strings.HasPrefix(err.Error(), "hedgegrpc: ") {
				t.Fatalf("error without the package prefix: %v", err)
			}
			return
		}
		// DialOptions' copy for grpc-go names a load-balancing policy and
		// holds the same hedging config.
		withLB, err := withBalancer(string(js))
		if err != nil {
			t.Fatalf("withBalancer of a valid config: %v", err)
		}
		if sc2, err := ParseServiceConfig([]byte(withLB)); err != nil || len(sc2.methods) != len(sc.methods) || (sc2.Throttling == nil) != (sc.Throttling == nil) {
			t.Fatalf("withBalancer changed the hedging config: %s (%v)", withLB, err)
		}
		if root, _ := object([]byte(withLB), ""); !slices.ContainsFunc(slices.Collect(maps.Keys(root)), func(k string) bool {
			return strings.EqualFold(k, "loadBalancingConfig") || strings.EqualFold(k, "loadBalancingPolicy")
		}) {
			t.Fatalf("withBalancer named no policy: %s", withLB)
		}
		for path, mc := range sc.methods {
			if path != "" && (!strings.HasPrefix(path, "/") || strings.Count(path, "/") < 2) {
				t.Fatalf("bad path %q", path)
			}
			hp := mc.Hedging
			if hp == nil {
				continue
			}
			if hp.MaxAttempts < 2 || hp.MaxAttempts > MaxAttemptsLimit {
				t.Fatalf("%s: maxAttempts %d out of [2, %d]", path, hp.MaxAttempts, MaxAttemptsLimit)
			}
			if hp.Delay < 0 || (hp.Adaptive && hp.Delay != 0) {
				t.Fatalf("%s: delay %v adaptive %v", path, hp.Delay, hp.Adaptive)
			}
			for _, c := range hp.NonFatalCodes {
				if c == codes.OK || c > codes.Unauthenticated {
					t.Fatalf("%s: code %v", path, c)
				}
			}
			// Every path the config holds is found by its own name.
			if got, ok := sc.Method(path); path != "" && (!ok || got != mc) {
				t.Fatalf("Method(%q) does not find its own entry", path)
			}
		}
		if th := sc.Throttling; th != nil {
			if !(th.MaxTokens > 0 && th.MaxTokens <= 1000) || !(th.TokenRatio >= 0.001 && th.TokenRatio <= 1000) {
				t.Fatalf("throttling %+v out of range", th)
			}
			if m := th.TokenRatio * 1000; math.Abs(m-math.Round(m)) > 1e-6 {
				t.Fatalf("tokenRatio %v has more than three decimals", th.TokenRatio)
			}
			tt := newThrottle(th)
			if !tt.allow() {
				t.Fatal("a fresh throttle must allow hedges")
			}
		}
	})
}

// protoDuration is the proto3 JSON form of google.protobuf.Duration that
// time.ParseDuration also reads: a sign, seconds without leading zeros, at
// most nine fractional digits, at least one digit, "s".
var protoDuration = regexp.MustCompile(`^[+-]?(0|[1-9][0-9]*)?(\.[0-9]{0,9})?s$`)

// FuzzParseDuration compares parseDuration with time.ParseDuration: every
// duration parseDuration accepts has the value time.ParseDuration gives
// it, and every string of the proto3 form with a digit that
// time.ParseDuration reads is accepted, with that value.
func FuzzParseDuration(f *testing.F) {
	for _, s := range []string{"0s", "1s", ".5s", "+1.000340012s", "-2s", "3.s", ".s", "01s", "1ms", "9223372035.999999999s", "1e3s", "-.0s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseDuration(s)
		want, werr := time.ParseDuration(s)
		if err == nil {
			if werr != nil || d != want {
				t.Fatalf("parseDuration(%q) = %v; time.ParseDuration: %v, %v", s, d, want, werr)
			}
			if !protoDuration.MatchString(s) || !strings.ContainsAny(s, "0123456789") {
				t.Fatalf("parseDuration(%q) accepted a string outside the proto3 form", s)
			}
			return
		}
		if protoDuration.MatchString(s) && strings.ContainsAny(s, "0123456789") && werr == nil &&
			want.Abs() < 9223372036*time.Second-time.Second {
			t.Fatalf("parseDuration(%q): %v; time.ParseDuration reads it as %v", s, err, want)
		}
	})
}

// A method whose service config pins hedgingDelay reports that delay in
// the policy's stats (KeyStats.Delay, Pinned), not the policy's adaptive
// one; so does a call's WithDelay; a method without hedgingDelay reports
// the policy's.
func TestStatsReportPinnedHedgingDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := mustPolicy(t, tailcut.Config{WarmupDelay: 25 * time.Millisecond})
		sc := mustConfig(t, `{"methodConfig": [
			{"name": [{"service": "grpc.testing.TestService", "method": "UnaryCall"}], "hedgingPolicy": {"maxAttempts": 2, "hedgingDelay": "0.01s"}},
			{"name": [{}], "hedgingPolicy": {"maxAttempts": 2}}]}`)
		ic := UnaryClientInterceptor(p, WithServiceConfig(sc))
		f := newFake(func(int) reply { return reply{after: time.Millisecond} })
		const adaptive = "/grpc.testing.TestService/EmptyCall"
		check := func(when, key string, want time.Duration, pinned bool) {
			t.Helper()
			for _, k := range p.Stats().Keys {
				if k.Key == key {
					if k.Delay != want || k.Pinned != pinned {
						t.Errorf("%s: %s Delay %v pinned %v, want %v pinned %v", when, key, k.Delay, k.Pinned, want, pinned)
					}
					return
				}
			}
			t.Errorf("%s: no stats for %s", when, key)
		}
		for _, c := range []struct {
			when, method string
			opts         []grpc.CallOption
			want         time.Duration
			pinned       bool
		}{
			{"hedgingDelay 0.01s", unaryMethod, nil, 10 * time.Millisecond, true},
			{"no hedgingDelay", adaptive, nil, 25 * time.Millisecond, false},
			{"WithDelay", adaptive, []grpc.CallOption{WithDelay(40 * time.Millisecond)}, 40 * time.Millisecond, true},
			{"no hedgingDelay again", adaptive, nil, 25 * time.Millisecond, false},
		} {
			if _, _, err := callMethod(t.Context(), c.method, ic, f, c.opts...); err != nil {
				t.Fatal(err)
			}
			check(c.when, c.method, c.want, c.pinned)
		}
	})
}
