package fleet

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/tailcut/tailcut"
)

// TestConfigFromYAML: Config reads from a configuration file as the proxy
// embeds it, durations as strings, typos refused.
func TestConfigFromYAML(t *testing.T) {
	const doc = `
instance: proxy-7
interval: 5s
ttl: 20s
timeout: 1s
max_keys: 32
keys: [api.internal:443, db.internal:5432]
warm_keys: -1
keep_stale: 1m
redis:
  addrs: [127.0.0.1:6379]
  prefix: svc
  max_instances: 16
`
	var c Config
	dec := yaml.NewDecoder(strings.NewReader(doc))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatal(err)
	}
	if c.Instance != "proxy-7" || c.Interval != 5*time.Second || c.TTL != 20*time.Second || c.Timeout != time.Second ||
		c.MaxKeys != 32 || len(c.Keys) != 2 || c.WarmKeys != -1 || c.KeepStale != time.Minute ||
		c.Redis.Addrs[0] != "127.0.0.1:6379" || c.Redis.Prefix != "svc" || c.Redis.MaxInstances != 16 {
		t.Errorf("decoded %+v", c)
	}
	p := newPolicy(t)
	if _, err := New(p, &Memory{}, c); err != nil {
		t.Errorf("the decoded config does not validate: %v", err)
	}
	dec = yaml.NewDecoder(strings.NewReader("intervall: 5s\n"))
	dec.KnownFields(true)
	if err := dec.Decode(&Config{}); err == nil {
		t.Error("a misspelt field was accepted")
	}
}

// TestPooled: the one-off fetch for tailcut.Config.Warm.
func TestPooled(t *testing.T) {
	store := &Memory{}
	ctx := context.Background()
	ds := draw(3, 300, 40, 0.3)
	_ = store.Publish(ctx, "a", []Entry{{"k", encodePayload(nil, snapshotOf(t, ds[:150]...))}}, time.Minute)
	_ = store.Publish(ctx, "b", []Entry{{"k", encodePayload(nil, snapshotOf(t, ds[150:]...))}, {"junk", []byte("x")}}, time.Minute)
	s, ok, err := Pooled(ctx, store, "k", 0)
	if err != nil || !ok || s.Count() != 300 {
		t.Fatalf("Pooled = %v, %v, %v; want the 300 samples", s, ok, err)
	}
	p, err := tailcut.New(tailcut.Config{Quantile: 0.95, Warm: s})
	if err != nil {
		t.Fatal(err)
	}
	if d, want := p.Delay("any", t0), exactQuantile(ds, 0.95); !within(d, want, 0.01) {
		t.Errorf("warm delay %v, want the fleet's p95 %v", d, want)
	}
	if _, ok, err := Pooled(ctx, store, "junk", 0); ok || err != nil {
		t.Errorf("Pooled of a junk payload: ok=%v err=%v", ok, err)
	}
	down := &flaky{}
	down.down.Store(true)
	if _, _, err := Pooled(ctx, down, "k", 0); err == nil {
		t.Error("Pooled hid the store's error")
	}
}
