// Package fleet pools the latency knowledge of many instances of a client,
// through Redis, so that a quiet or freshly started instance hedges at the
// delay the whole fleet has measured instead of at a guess.
//
// A client instance that does few requests per key gets too few samples per
// window for a trustworthy quantile, and a new instance knows nothing at all:
// the policy then hedges at its WarmupDelay, which for most services means
// hedging nearly every request until the budget says no. DDSketches merge
// exactly, so a fleet can pool them: every instance publishes its per-key
// sketch (both windows, [tailcut.Policy.Snapshot]) and reads back the merged
// sketches of all instances ([tailcut.Policy.SetFleet]). The policy uses the
// pooled distribution only while its own windows hold fewer than MinSamples
// observations; a busy instance keeps hedging on what it measures itself.
//
// A [Syncer] does the work in its own goroutine, once per Config.Interval:
// publish, then fetch and merge. The request path never waits for it — it
// only reads what the policy already holds — so Redis being down or slow
// never blocks or fails a request: a round that fails is logged once (and its
// recovery once), and the policy carries on with the last pooled estimate for
// Config.KeepStale, then with its own windows alone. (go-redis also logs each
// failed dial through its own global logger; redis.SetLogger silences it.)
// After Redis returns, go-redis reconnects within about a second and the next
// round publishes and pools again.
//
// # Layout in Redis
//
// For a tailcut key K (usually a host) and an instance I, with the default
// prefix:
//
//	tailcut:{K}:i:I    string: I's sketch of K, SET with EX = Config.TTL
//	tailcut:{K}:m      set: the instances that published K (PEXPIRE TTL)
//	tailcut:keys       sorted set: keys by last publication (unix seconds)
//
// The hash tag {K} keeps one key's entries in one Redis Cluster slot, so a
// reader fetches them with one MGET; braces and '%' in K are percent-escaped
// so the tag is exactly K. Redis expires each instance's string itself
// (Redis 7.0 has no per-field hash TTL: HEXPIRE needs 7.4), so a dead
// instance's sketch disappears after TTL without anyone reading a clock. The
// member set is only an index: a reader that finds a member whose string has
// expired removes it (SREM), so the set holds the instances alive in the last
// TTL and nothing needs SCAN. The keys index lets a new instance learn the
// fleet's keys before its first request (Config.WarmKeys); it is trimmed to
// the last TTL on every publication.
//
// # Costs
//
// A payload is one version byte and the sketch's compact encoding: about
// 60 B for 20 samples, 160 B for 100, 350–700 B for thousands, and never more
// than Config.MaxPayload (16 KiB by default; a sketch holds at most 1,024
// bins); a larger one is neither published nor accepted. An instance
// publishes at most Config.MaxKeys keys per round in one pipelined round trip
// (a SET, SADD and PEXPIRE per key, a ZADD and ZREMRANGEBYSCORE for the
// index), and fetches them in two: SRANDMEMBER of at most
// Redis.MaxInstances (default 32) members per key, then one MGET per key.
// Reading a random sample of instances bounds what a big fleet costs a
// reader: per round at most MaxKeys × MaxInstances payloads, typically
// 32 × 300–700 B ≈ 10–22 KB per key. Redis holds instances × keys payloads.
// Decoding and merging the payloads is the round's main cost
// (BenchmarkMerge32 measures it per payload, BenchmarkRound* a whole round
// over memory, a loopback miniredis or a loopback redis-server); it is paid
// once per Interval, outside the request path.
//
// # Consistency
//
// Entries live TTL (default three intervals) from their last publication, by
// Redis's clock. The merged distribution is the union of every sampled
// instance's last two windows, so it lags a change of the downstream by up to
// a window plus an interval; an instance's own windows take over as soon as
// they hold MinSamples. A reader that removes a member at the very moment its
// instance republishes after a gap of more than TTL leaves that instance out
// of the index until its next round.
package fleet
