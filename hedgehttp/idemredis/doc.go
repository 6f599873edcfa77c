// Package idemredis is a Redis [hedgehttp.Store] for the idempotency
// middleware: a fleet of servers behind one Redis (or Redis Cluster) runs
// each keyed write once, whichever server each copy of it reaches.
//
// It lives in a package of its own so that go-redis stays out of hedgehttp.
//
// # Layout in Redis
//
// An idempotency key K (64 hex digits, chosen by the middleware) is one
// Redis string, prefix + "{" + K + "}", that holds one thing at a time:
//
//	'L' fingerprint(32 bytes) token    a lock, SET NX PX lease
//	'R' record                         a stored response (hedgehttp.Record.Encode), SET PX ttl
//
// Begin is SET NX PX run in a Lua script together with the GET that tells,
// when the key is taken, what holds it: one round trip, atomic. Extend,
// Complete and Release are compare-and-set scripts: they act only if the
// key holds a lock with the caller's token (Complete also if it holds
// nothing), so a request whose lease passed and whose key another request
// took can neither extend, overwrite nor delete what the other holds. Lock and record being one key, every script
// touches one key; the braces make it a Cluster hash tag anyway, so that
// anything kept beside a key later lands in the same slot.
//
// A keyed write that runs costs two round trips (Begin, then Complete or
// Release) and one more per LockLease/3 that it runs; a replay costs one.
// BenchmarkStoreRealRedis measures both over loopback to a local
// redis-server.
//
// Redis's own clock runs the leases and TTLs; the servers' clocks do not
// matter.
//
// What Redis forgets, the store forgets: a Redis restarted without
// persistence, a failover to a replica that had not received the last
// writes, or eviction under maxmemory (use a noeviction or volatile-* policy)
// lets a copy that comes after run again. For the guarantee to survive a
// crash, run Redis with appendonly yes and appendfsync always (everysec may
// lose the last second); TestRedisKilledMidTest kills redis-server so
// configured and finds every stored response again after the restart.
//
// # When Redis is down
//
// Every method then returns the client's error and the middleware fails
// closed: keyed writes get 503 with Retry-After, and none runs. A command
// whose reply was lost (the connection died after Redis applied it) may be
// retried once by the client (Config.Open sets MaxRetries 1, so that
// connections pooled before a Redis restart do not fail a request each);
// every retry is safe: a Begin retried after it set the lock finds its own
// lock and waits it out like any copy (ClaimInProgress, then 409 or the
// lease's end), a Complete retried after it acted finds its own record and
// reports success, and a Release retried after it acted reports
// hedgehttp.ErrLockLost.
//
// A response whose Complete fails is not lost while its server runs: the
// middleware keeps its key locked in that process (copies sent there get
// the response from memory) and stores it once Redis answers again. With
// appendonly yes the lock survives a Redis restart until its lease ends;
// an outage longer than LockLease lets a copy sent to another server run
// before the response is stored (TestRedisKilledMidRunNoKeyRunsTwice).
package idemredis
