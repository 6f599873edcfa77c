package hedgegrpc

import (
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/serviceconfig"
)

// The service config grpc-go holds reaches the interceptors through the
// [BalancerName] balancer: grpc-go hands each balancer the resolver's
// state, whose ServiceConfig is the config a resolver delivered (DNS, xDS,
// a manual resolver), and keeps no hedgingPolicy of its own (it parses
// none). Each balancer reads the config's JSON and publishes its hedging
// part under its ClientConn's canonical target; an interceptor looks up
// the target of the ClientConn a call goes through. A config given to
// grpc.WithDefaultServiceConfig is not handed to balancers: give it to
// [WithServiceConfig] too, or build both from one string with
// [DialOptions].

// resolvedConfig is the hedging part of a service config a resolver
// delivered.
type resolvedConfig struct {
	raw string         // the config's JSON, to compare
	sc  *ServiceConfig // nil when err is set
	err error          // the JSON could not be read or parsed
}

// targetSlot is what the balancers of one target hold. cur is the config
// they agree on: nil when none of them has one from its resolver (the
// interceptor's own, WithServiceConfig, then applies), ambiguous when two
// ClientConns to the same target were handed different configs.
type targetSlot struct {
	mu  sync.Mutex
	lbs map[*hedgeLB]*resolvedConfig
	cur atomic.Pointer[resolvedConfig]
}

// errAmbiguous is the state of a target whose ClientConns' resolvers
// delivered different service configs: no interceptor can tell which its
// call's is.
var errAmbiguous = errors.New("ClientConns to this target were given different service configs by their resolvers")

var registry struct {
	mu    sync.Mutex
	slots map[string]*targetSlot // never removed: one per target ever dialled
}

// slotOf returns the slot of target, making it if need be.
func slotOf(target string) *targetSlot {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	s := registry.slots[target]
	if s == nil {
		if registry.slots == nil {
			registry.slots = make(map[string]*targetSlot)
		}
		s = &targetSlot{lbs: make(map[*hedgeLB]*resolvedConfig)}
		registry.slots[target] = s
	}
	return s
}

// set records that b holds rc (nil: no config from its resolver), or, if
// gone, that b is closed; and republishes the slot's config.
func (s *targetSlot) set(b *hedgeLB, rc *resolvedConfig, gone bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch prev, ok := s.lbs[b]; {
	case gone:
		delete(s.lbs, b)
	case ok && prev != nil && rc != nil && prev.raw != "" && prev.raw == rc.raw:
		// The same JSON again (grpc-go hands every resolver update
		// over): keep the config in force, whose pointers the calls
		// in flight and the interceptors' caches hold.
	default:
		s.lbs[b] = rc
	}
	var cur *resolvedConfig
	first := true
	for _, x := range s.lbs {
		switch {
		case first:
			cur, first = x, false
		case (x == nil) != (cur == nil) || x != nil && x.raw != cur.raw:
			s.cur.Store(&resolvedConfig{err: errAmbiguous})
			return
		}
	}
	s.cur.Store(cur)
}

// fromResolver returns the hedging part of the service config a resolver
// delivered, or nil if it delivered none (or one grpc-go rejected, which
// grpc-go does not apply either). grpc-go keeps the config's JSON in an
// unexported field of its ServiceConfig (a type it asks users not to
// use), read here by reflection; TestLoopbackResolverServiceConfigAlone
// fails if a grpc-go release renames it.
func fromResolver(pr *serviceconfig.ParseResult) *resolvedConfig {
	if pr == nil || pr.Err != nil || pr.Config == nil {
		return nil
	}
	v := reflect.ValueOf(pr.Config)
	if t := v.Type(); t.Kind() != reflect.Pointer || v.IsNil() || t.Elem().PkgPath() != "google.golang.org/grpc" || t.Elem().Name() != "ServiceConfig" {
		return &resolvedConfig{err: fmt.Errorf("the resolver's service config is a %T, not grpc-go's", pr.Config)}
	}
	f := v.Elem().FieldByName("rawJSONString")
	if !f.IsValid() || f.Kind() != reflect.String {
		return &resolvedConfig{err: errors.New("this grpc-go release does not keep the resolver's service config as JSON where hedgegrpc reads it")}
	}
	raw := f.String()
	sc, err := ParseServiceConfig([]byte(raw))
	if err != nil {
		return &resolvedConfig{raw: raw, err: err}
	}
	return &resolvedConfig{raw: raw, sc: sc}
}

// ccCacheLimit bounds how many targets an interceptor remembers the slot
// of; calls to more look their target up in the registry each time.
const ccCacheLimit = 256

// serviceConfig returns the service config in force for a call through
// cc: the one cc's resolver delivered, if a [BalancerName] balancer holds
// one, else the interceptor's own ([WithServiceConfig], may be nil).
func (c *client) serviceConfig(cc *grpc.ClientConn) *ServiceConfig {
	if cc == nil {
		return c.sc
	}
	// Cached by target, not by ClientConn: the cache must not keep
	// closed ClientConns alive.
	var s *targetSlot
	target := cc.CanonicalTarget()
	if v, ok := c.slots.Load(target); ok {
		s = v.(*targetSlot)
	} else {
		s = slotOf(target)
		if c.nslots.Add(1) <= ccCacheLimit {
			c.slots.Store(target, s)
		}
	}
	rc := s.cur.Load()
	switch {
	case rc == nil:
		return c.sc
	case rc.err != nil:
		c.warnOnce(&c.warned.resolver, "the resolver's service config is not used for hedging; the interceptor's own applies",
			"target", cc.CanonicalTarget(), "err", rc.err)
		return c.sc
	}
	return rc.sc
}

// warnings are the conditions an interceptor logs once each.
type warnings struct {
	resolver, noBalancer, oneBackend, capped atomic.Bool
}

// warnOnce logs msg with args at Warn level, the first time *done is
// found false.
func (c *client) warnOnce(done *atomic.Bool, msg string, args ...any) {
	if done.Load() || !done.CompareAndSwap(false, true) {
		return
	}
	c.logger().Warn("hedgegrpc: "+msg, args...)
}

// logger returns the logger of WithLogger, or slog.Default.
func (c *client) logger() *slog.Logger {
	if c.log != nil {
		return c.log
	}
	return slog.Default()
}

// checkPick is called once attempt k of a call that launched hedges has
// reached a server (it answered, or its stream opened). It warns once when
// the call's hedges could only go where its original went: no
// [BalancerName] balancer recorded where attempt k was sent (grpc-go's
// pick_first sends every attempt to the one backend it is connected to),
// or another attempt of the call was sent to the same backend (a single
// backend ready).
func (c *client) checkPick(p *picks, k int, method string) {
	p.mu.Lock()
	used := p.used
	p.mu.Unlock()
	if used[k] == nil {
		c.warnOnce(&c.warned.noBalancer, `hedges go where grpc-go's load-balancing policy sends them, without the "`+BalancerName+`" policy: under pick_first, to the original's backend. Add {"loadBalancingConfig": [{"`+BalancerName+`": {}}]} to the service config`,
			"method", method)
		return
	}
	for j, r := range used {
		if j != k && r == used[k] {
			c.warnOnce(&c.warned.oneBackend, "hedges went to their original's backend: only one backend was ready", "method", method)
			return
		}
	}
}
