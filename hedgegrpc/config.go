package hedgegrpc

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
)

// MaxAttemptsLimit is the client-side cap on hedgingPolicy.maxAttempts: a
// larger value is treated as 5, as gRFC A6 prescribes, so that a service
// config delivered by DNS cannot make a client multiply its load.
const MaxAttemptsLimit = 5

// ServiceConfig is the part of a gRPC service config (gRFC A6) that hedging
// uses: the hedgingPolicy of each methodConfig and the retryThrottling
// settings. Build one with [ParseServiceConfig] and pass it to
// [UnaryClientInterceptor] with [WithServiceConfig].
//
// A ServiceConfig is immutable and safe for concurrent use.
type ServiceConfig struct {
	// methods maps a gRPC path ("/pkg.Service/Method", "/pkg.Service/" or
	// "" for the default) to its method config, as grpc-go does.
	methods map[string]*MethodConfig

	// Throttling is the retryThrottling block, or nil if the config has
	// none (hedges are then limited by the tailcut budget only).
	Throttling *Throttling
}

// MethodConfig is one methodConfig entry of a service config, as far as
// hedging is concerned.
type MethodConfig struct {
	// Hedging is the entry's hedgingPolicy, or nil if it has none: calls
	// to the methods it names are then sent once, never hedged.
	Hedging *HedgingPolicy
}

// HedgingPolicy is a methodConfig's hedgingPolicy (gRFC A6).
type HedgingPolicy struct {
	// MaxAttempts is the most attempts a call may send, the original
	// included: 2 to [MaxAttemptsLimit]. The tailcut.Policy's MaxHedges
	// caps it too (see [UnaryClientInterceptor]).
	MaxAttempts int

	// Delay is the fixed hedgingDelay between attempts. It is only
	// meaningful when Adaptive is false; zero sends every attempt at once,
	// as in A6.
	Delay time.Duration

	// Adaptive is true when the config has no hedgingDelay: the delay is
	// then the tailcut.Policy's for the method (by default its auto delay,
	// chosen from the method's measured latency; see
	// tailcut.Config.Quantile).
	// (A6 reads an absent hedgingDelay as "0s"; tailcut reads it as "let
	// the policy choose", and "0s" keeps its A6 meaning.)
	Adaptive bool

	// NonFatalCodes are the status codes after which the next attempt is
	// sent at once instead of the call failing. Nil means the
	// interceptor's default (UNAVAILABLE unless [WithNonFatalCodes] says
	// otherwise); an empty, non-nil slice means every error is final.
	NonFatalCodes []codes.Code
}

// Throttling is the retryThrottling block of a service config (gRFC A6):
// a token count starts at MaxTokens, every failed attempt takes one token,
// every successful call gives back TokenRatio, and while the count is at or
// below MaxTokens/2 no hedge is sent (the original attempt always is).
type Throttling struct {
	// MaxTokens is in (0, 1000].
	MaxTokens float64
	// TokenRatio is > 0, in thousandths: decimals beyond three are dropped
	// (A6: 0.5466 is 0.546).
	TokenRatio float64
}

// Method returns the method config that applies to fullMethod
// ("/pkg.Service/Method"), with gRPC's precedence: the entry naming the
// method, else the entry naming its service only, else the default entry
// (a name with neither service nor method). ok is false when no entry
// applies.
func (sc *ServiceConfig) Method(fullMethod string) (mc *MethodConfig, ok bool) {
	if sc == nil {
		return nil, false
	}
	if mc, ok := sc.methods[fullMethod]; ok {
		return mc, true
	}
	if i := strings.LastIndexByte(fullMethod, '/'); i >= 0 {
		if mc, ok := sc.methods[fullMethod[:i+1]]; ok {
			return mc, true
		}
	}
	mc, ok = sc.methods[""]
	return mc, ok
}

// maxAttempts returns the largest MaxAttempts of any hedging policy, or 0.
func (sc *ServiceConfig) maxAttempts() int {
	n := 0
	if sc == nil {
		return 0
	}
	for _, mc := range sc.methods {
		if mc.Hedging != nil && mc.Hedging.MaxAttempts > n {
			n = mc.Hedging.MaxAttempts
		}
	}
	return n
}

// ParseServiceConfig parses a gRPC service config in its JSON form (the
// same file grpc-java, grpc-go and gRPC .NET read) and keeps what hedging
// needs: methodConfig[].name[] and hedgingPolicy, and retryThrottling.
// Fields it does not use (loadBalancingConfig, timeout, retryPolicy, …) are
// ignored, but must still be well-formed JSON. Field names are accepted in
// lowerCamelCase or snake_case, as proto3 JSON allows. As gRFC A6 says,
// status codes are integers or names in any case (14, "UNAVAILABLE",
// "unavailable"; grpc-go and grpc-java take upper case only), durations
// the proto3 JSON form of google.protobuf.Duration ("0.05s", read by
// protojson), and tokenRatio keeps three decimals, the rest dropped
// (0.5466 is 0.546).
//
// Errors point at the field: "hedgegrpc: methodConfig[2].hedgingPolicy.maxAttempts:
// must be at least 2, got 1".
func ParseServiceConfig(js []byte) (*ServiceConfig, error) {
	root, err := object(js, "service config")
	if err != nil {
		return nil, err
	}
	sc := &ServiceConfig{methods: make(map[string]*MethodConfig)}
	if raw, ok := field(root, "methodConfig", "method_config"); ok {
		var mcs []json.RawMessage
		if err := decodeArray(raw, &mcs, "methodConfig"); err != nil {
			return nil, err
		}
		for i, raw := range mcs {
			if err := sc.parseMethodConfig(raw, fmt.Sprintf("methodConfig[%d]", i)); err != nil {
				return nil, err
			}
		}
	}
	if raw, ok := field(root, "retryThrottling", "retry_throttling"); ok && !isNull(raw) {
		t, err := parseThrottling(raw, "retryThrottling")
		if err != nil {
			return nil, err
		}
		sc.Throttling = t
	}
	return sc, nil
}

func (sc *ServiceConfig) parseMethodConfig(raw json.RawMessage, at string) error {
	m, err := object(raw, at)
	if err != nil {
		return err
	}
	mc := &MethodConfig{}
	hp, hasHedge := field(m, "hedgingPolicy", "hedging_policy")
	rp, hasRetry := field(m, "retryPolicy", "retry_policy")
	if hasHedge && isNull(hp) {
		hasHedge = false
	}
	if hasRetry && isNull(rp) {
		hasRetry = false
	}
	if hasHedge && hasRetry {
		return errorf(at, "retryPolicy and hedgingPolicy are mutually exclusive")
	}
	if hasHedge {
		if mc.Hedging, err = parseHedgingPolicy(hp, at+".hedgingPolicy"); err != nil {
			return err
		}
	}
	rawNames, ok := field(m, "name")
	if !ok || isNull(rawNames) {
		// grpc-go skips an entry without names; so do we.
		return nil
	}
	var names []json.RawMessage
	if err := decodeArray(rawNames, &names, at+".name"); err != nil {
		return err
	}
	for j, rn := range names {
		nat := fmt.Sprintf("%s.name[%d]", at, j)
		n, err := object(rn, nat)
		if err != nil {
			return err
		}
		service, err := stringField(n, nat+".service", "service")
		if err != nil {
			return err
		}
		method, err := stringField(n, nat+".method", "method")
		if err != nil {
			return err
		}
		var path string
		switch {
		case service == "" && method != "":
			return errorf(nat, "a method (%q) needs a service", method)
		case service == "":
			path = ""
		default:
			path = "/" + service + "/" + method
		}
		if _, dup := sc.methods[path]; dup {
			return errorf(nat, "duplicate name (service %q, method %q)", service, method)
		}
		sc.methods[path] = mc
	}
	return nil
}

func parseHedgingPolicy(raw json.RawMessage, at string) (*HedgingPolicy, error) {
	m, err := object(raw, at)
	if err != nil {
		return nil, err
	}
	hp := &HedgingPolicy{Adaptive: true}
	rawMax, ok := field(m, "maxAttempts", "max_attempts")
	if !ok || isNull(rawMax) {
		return nil, errorf(at+".maxAttempts", "is required")
	}
	n, err := integer(rawMax, at+".maxAttempts")
	if err != nil {
		return nil, err
	}
	if n < 2 {
		return nil, errorf(at+".maxAttempts", "must be at least 2, got %d", n)
	}
	hp.MaxAttempts = int(min(n, MaxAttemptsLimit))

	if rawDelay, ok := field(m, "hedgingDelay", "hedging_delay"); ok && !isNull(rawDelay) {
		var s string
		if err := json.Unmarshal(rawDelay, &s); err != nil {
			return nil, errorf(at+".hedgingDelay", "must be a duration string such as \"0.5s\", got %s", clip(rawDelay))
		}
		d, err := parseDuration(s)
		if err != nil {
			return nil, errorf(at+".hedgingDelay", "%v", err)
		}
		if d < 0 {
			return nil, errorf(at+".hedgingDelay", "must not be negative, got %q", s)
		}
		hp.Delay, hp.Adaptive = d, false
	}

	if rawCodes, ok := field(m, "nonFatalStatusCodes", "non_fatal_status_codes"); ok && !isNull(rawCodes) {
		var list []json.RawMessage
		if err := decodeArray(rawCodes, &list, at+".nonFatalStatusCodes"); err != nil {
			return nil, err
		}
		hp.NonFatalCodes = make([]codes.Code, 0, len(list))
		for k, rc := range list {
			c, err := parseCode(rc, fmt.Sprintf("%s.nonFatalStatusCodes[%d]", at, k))
			if err != nil {
				return nil, err
			}
			hp.NonFatalCodes = append(hp.NonFatalCodes, c)
		}
	}
	return hp, nil
}

func parseThrottling(raw json.RawMessage, at string) (*Throttling, error) {
	m, err := object(raw, at)
	if err != nil {
		return nil, err
	}
	t := &Throttling{}
	rawMax, ok := field(m, "maxTokens", "max_tokens")
	if !ok || isNull(rawMax) {
		return nil, errorf(at+".maxTokens", "is required")
	}
	if t.MaxTokens, err = number(rawMax, at+".maxTokens"); err != nil {
		return nil, err
	}
	if !(t.MaxTokens > 0 && t.MaxTokens <= 1000) {
		return nil, errorf(at+".maxTokens", "must be in (0, 1000], got %v", t.MaxTokens)
	}
	if math.Round(t.MaxTokens*1000) < 1 {
		return nil, errorf(at+".maxTokens", "must be at least 0.001 (three decimals are kept), got %v", t.MaxTokens)
	}
	rawRatio, ok := field(m, "tokenRatio", "token_ratio")
	if !ok || isNull(rawRatio) {
		return nil, errorf(at+".tokenRatio", "is required")
	}
	r, err := number(rawRatio, at+".tokenRatio")
	if err != nil {
		return nil, err
	}
	if !(r > 0) {
		return nil, errorf(at+".tokenRatio", "must be greater than 0, got %v", r)
	}
	// A6: "Decimal places beyond 3 are ignored. (eg. 0.5466 is treated
	// as 0.546.)" gRPC's C core counts in thousandths of a token too.
	milli := 1e6 // 1000 tokens or more: more than maxTokens can hold anyway
	if r < 1000 {
		milli = thousandths(rawRatio, r)
	}
	if milli < 1 {
		return nil, errorf(at+".tokenRatio", "must be at least 0.001 (decimals beyond three are dropped), got %s", clip(rawRatio))
	}
	t.TokenRatio = milli / 1000
	return t, nil
}

// parseCode reads a status code as gRFC A6 writes them: a JSON integer
// (14) or a string naming it in any case ("UNAVAILABLE", "unavailable").
// grpc's own parser, (*codes.Code).UnmarshalJSON, decides what is a code:
// it wants the integer or the upper-case name, so a name is upper-cased
// (ASCII only, as A6's case-insensitivity means) before it is asked. A
// string of digits ("14") is no name, and is refused, as grpc-go and
// grpc-java refuse it.
func parseCode(raw json.RawMessage, at string) (codes.Code, error) {
	var c codes.Code
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		if err := c.UnmarshalJSON(strconv.AppendQuote(nil, asciiUpper(s))); err != nil {
			return 0, errorf(at, "unknown status code %q", s)
		}
	} else {
		n, err := integer(raw, at)
		if err != nil {
			return 0, errorf(at, "must be a status code name or number, got %s", clip(raw))
		}
		if n < 0 || c.UnmarshalJSON(strconv.AppendInt(nil, n, 10)) != nil {
			return 0, errorf(at, "status code %d out of range [1, 16]", n)
		}
	}
	if c == codes.OK {
		return 0, errorf(at, "OK cannot be a non-fatal status code")
	}
	return c, nil
}

// asciiUpper upper-cases the ASCII letters of s, and only them: "ı" and
// "ſ" do not become "I" and "S" (strings.ToUpper would make them).
func asciiUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'a' <= c && c <= 'z' {
			b[i] = c - ('a' - 'A')
		}
	}
	return string(b)
}

// parseDuration parses s, the content of a JSON string, as the proto3
// JSON form of google.protobuf.Duration, with protojson: an optional sign,
// decimal seconds with at most nine fractional digits, and the suffix "s"
// ("1s", "0.5s", ".5s" as in A6's examples, "+1.000340012s"). A duration
// beyond time.Duration's ±292 years is refused rather than clamped.
func parseDuration(s string) (time.Duration, error) {
	js, _ := json.Marshal(s) // a string always marshals
	var pd durationpb.Duration
	// protojson takes ".s" for 0 although its doc wants digits; grpc-go
	// and grpc-java refuse it: so does this.
	if err := protojson.Unmarshal(js, &pd); err != nil || !strings.ContainsAny(s, "0123456789") {
		return 0, fmt.Errorf("malformed duration %q: want decimal seconds (at most nine fractional digits) with an \"s\" suffix, such as \"0.5s\"", s)
	}
	const maxSeconds = math.MaxInt64 / int64(time.Second)
	if pd.Seconds >= maxSeconds || pd.Seconds <= -maxSeconds {
		return 0, fmt.Errorf("duration %q out of range", s)
	}
	return pd.AsDuration(), nil
}

// thousandths returns the number raw (whose value is f, 0 < f < 1000)
// in thousandths, the decimals beyond three dropped, as A6 says of
// tokenRatio ("0.5466 is treated as 0.546"). It truncates the decimal
// number as written, exactly (big.Rat), not its nearest float64: 4.35 is
// 4350 thousandths, where math.Floor(4.35*1000) is 4349.
func thousandths(raw json.RawMessage, f float64) float64 {
	var q big.Rat
	if _, ok := q.SetString(string(bytes.TrimSpace(raw))); !ok {
		return math.Floor(f * 1000) // not reached: raw decoded as a JSON number
	}
	q.Mul(&q, big.NewRat(1000, 1))
	n := new(big.Int).Quo(q.Num(), q.Denom()) // q > 0: towards zero is down
	return float64(n.Int64())                 // < 1e6
}

// JSON helpers. The config is decoded field by field, not into structs, so
// that every error can name the exact field and index it comes from.

func object(raw []byte, at string) (map[string]json.RawMessage, error) {
	var m map[string]json.RawMessage
	err := json.Unmarshal(raw, &m)
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case err == nil && m == nil:
		return nil, errorf(at, "must be a JSON object, got null")
	case err == nil:
		return m, nil
	case errors.As(err, &syn):
		return nil, errorf(at, "invalid JSON at offset %d: %v", syn.Offset, err)
	case errors.As(err, &typ):
		return nil, errorf(at, "must be a JSON object, got %s", typ.Value)
	}
	return nil, errorf(at, "must be a JSON object: %v", err)
}

// field returns the first of names present in m.
func field(m map[string]json.RawMessage, names ...string) (json.RawMessage, bool) {
	for _, n := range names {
		if v, ok := m[n]; ok {
			return v, true
		}
	}
	return nil, false
}

func isNull(raw json.RawMessage) bool {
	return string(bytes.TrimSpace(raw)) == "null"
}

func decodeArray(raw json.RawMessage, out *[]json.RawMessage, at string) error {
	if err := json.Unmarshal(raw, out); err != nil {
		return errorf(at, "must be a JSON array, got %s", clip(raw))
	}
	return nil
}

func stringField(m map[string]json.RawMessage, at, name string) (string, error) {
	raw, ok := m[name]
	if !ok || isNull(raw) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", errorf(at, "must be a string, got %s", clip(raw))
	}
	return s, nil
}

func number(raw json.RawMessage, at string) (float64, error) {
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return 0, errorf(at, "must be a number, got %s", clip(raw))
	}
	return f, nil
}

func integer(raw json.RawMessage, at string) (int64, error) {
	f, err := number(raw, at)
	if err != nil {
		return 0, err
	}
	if f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, errorf(at, "must be an integer, got %s", clip(raw))
	}
	return int64(f), nil
}

// clip shortens a raw JSON value for an error message.
func clip(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 40 {
		return string(raw[:37]) + "..."
	}
	return string(raw)
}

func errorf(at, format string, args ...any) error {
	return fmt.Errorf("hedgegrpc: %s: %s", at, fmt.Sprintf(format, args...))
}
