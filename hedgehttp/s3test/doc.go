// Package s3test tests and measures hedgehttp's body hedging
// (hedgehttp.WithBodyHedge) with real clients: minio-go reading from an
// in-process S3 server (gofakes3), and net/http's client reading from
// http.ServeContent, whose Range semantics are net/http's own. Slow first
// bytes and mid-body stalls are injected by a handler in front of the
// server; every read's SHA-256 is compared with the object's. It is a
// module of its own so that its dependencies stay out of tailcut's.
//
// BenchmarkStalledReads measures 16 MiB reads of which 5 % stall for 2 s
// mid-body: the p99 against an unstalled read's time and the bytes
// transferred beyond the objects' (see the README).
package s3test
