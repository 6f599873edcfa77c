package s3test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/tailcut/tailcut/hedgehttp"
	"github.com/tailcut/tailcut/internal/longtest"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// sizes are the object sizes every test reads; longSizes are added under
// TAILCUT_LONG=1.
var (
	sizes     = []int{4 << 10, 300 << 10, 4 << 20}
	longSizes = []int{16 << 20, 64 << 20}
)

func testSizes(t *testing.T) []int {
	if longtest.Enabled() {
		return append(sizes[:len(sizes):len(sizes)], longSizes...)
	}
	return sizes
}

// faults are the faults injected into the first plain GET of each read:
// a slow first byte (the header hedge's case) and a mid-body stall (the
// Range hedge's), longer than any bound the reads may learn.
func faults(size int) map[string]fault {
	return map[string]fault{
		"none":            noFault,
		"slow first byte": {firstByte: 3 * time.Second, stallAt: -1},
		"mid-body stall":  {stallAt: int64(size) / 2, stall: 3 * time.Second},
	}
}

// bodyHedge is the options the tests watch bodies with: every body of
// 64 KiB or more.
var bodyHedge = hedgehttp.BodyHedge{MinSize: 64 << 10, MaxStall: 100 * time.Millisecond}

// hedging returns a function that puts a hedgehttp Transport with opts
// over a base, and the Transport made. Its header hedge goes at 500 ms:
// before the slow first byte, and late enough that a primary whose
// headers come late on a loaded machine is not hedged in the stall tests
// (the hedge would win, and no body would stall).
func hedging(t testing.TB, opts ...hedgehttp.Option) (func(http.RoundTripper) http.RoundTripper, **hedgehttp.Transport) {
	tr := new(*hedgehttp.Transport)
	return func(base http.RoundTripper) http.RoundTripper {
		var err error
		*tr, err = hedgehttp.New(base, policy(t, 500*time.Millisecond), opts...)
		if err != nil {
			t.Fatal(err)
		}
		return *tr
	}, tr
}

// reader is a real client reading an object from a real server through
// a hedging Transport: serve starts the server behind in, holding data,
// and returns a function that reads the object and returns its SHA-256.
type reader struct {
	name  string
	serve func(t *testing.T, in *injector, rt func(http.RoundTripper) http.RoundTripper, data []byte) func() [32]byte
}

// readers are minio-go reading from gofakes3, and net/http's client
// reading from http.ServeContent.
var readers = []reader{
	{"minio", func(t *testing.T, in *injector, rt func(http.RoundTripper) http.RoundTripper, data []byte) func() [32]byte {
		c, put := s3Server(t, in, rt)
		put("obj", data)
		return func() [32]byte { return minioRead(t, c, "obj") }
	}},
	{"ServeContent", func(t *testing.T, in *injector, rt func(http.RoundTripper) http.RoundTripper, data []byte) func() [32]byte {
		cs := &contentServer{}
		cs.put("obj", data)
		in.h = cs
		url, base := start(t, in)
		c := &http.Client{Transport: rt(base)}
		return func() [32]byte { return httpRead(t, c, url+"/obj") }
	}},
}

// firstOnly is a plan that injects f into the first plain GET only.
func firstOnly(f fault) func(int64) fault {
	return func(n int64) fault {
		if n == 0 {
			return f
		}
		return noFault
	}
}

// TestReads reads objects of every size through each reader, the first
// GET of each read slowed or stalled: every read has the object's bytes,
// and the fault was cut by a hedge.
func TestReads(t *testing.T) {
	for _, rd := range readers {
		for _, size := range testSizes(t) {
			for name, f := range faults(size) {
				t.Run(fmt.Sprintf("%s/%dKiB/%s", rd.name, size>>10, name), func(t *testing.T) {
					rt, tr := hedging(t, hedgehttp.WithBodyHedge(bodyHedge))
					data := objectData(size)
					read := rd.serve(t, &injector{plan: firstOnly(f)}, rt, data)
					if read() != sha256.Sum256(data) {
						t.Fatal("the object read is not the object stored")
					}
					checkCut(t, *tr, f, size)
				})
			}
		}
	}
}

// minioRead reads name from the bucket through c within 20 s and returns its
// SHA-256.
func minioRead(tb testing.TB, c *minio.Client, name string) [32]byte {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	obj, err := c.GetObject(ctx, bucket, name, minio.GetObjectOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	defer obj.Close()
	h := sha256.New()
	if _, err := io.Copy(h, obj); err != nil {
		tb.Fatalf("reading %s: %v", name, err)
	}
	return [32]byte(h.Sum(nil))
}

// checkCut checks that fault f of a read of size bytes was cut by a
// hedge: a header hedge for a slow first byte, a Range hedge for a stall.
func checkCut(t *testing.T, tr *hedgehttp.Transport, f fault, size int) {
	t.Helper()
	bs := tr.BodyStats()
	c := tr.Policy().Counts()
	switch {
	case f.firstByte > 0:
		if c.Wins[1] != 1 {
			t.Errorf("slow first byte: %d hedges won, want 1", c.Wins[1])
		}
	case f.stallAt >= 0 && size >= int(bodyHedge.MinSize):
		if bs.Won != 1 || bs.Dropped != 0 {
			t.Errorf("mid-body stall: BodyStats %+v, want 1 Range hedge won", bs)
		}
	}
}

// httpRead GETs url through c within 20 s and returns the body's SHA-256.
func httpRead(tb testing.TB, c *http.Client, url string) [32]byte {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		tb.Fatalf("GET %s: %s", url, resp.Status)
	}
	h := sha256.New()
	if _, err := io.Copy(h, resp.Body); err != nil {
		tb.Fatalf("reading %s: %v", url, err)
	}
	return [32]byte(h.Sum(nil))
}

// TestRangeUnsupported: a server that ignores Range and does not advertise
// Accept-Ranges has its bodies left alone, and with AssumeRanges its
// answers to Range hedges (the whole object, 200) are dropped: every read
// has the object's bytes, none twice, and the stall is waited out.
func TestRangeUnsupported(t *testing.T) {
	for _, size := range testSizes(t) {
		if size < int(bodyHedge.MinSize) {
			continue
		}
		for _, assume := range []bool{false, true} {
			t.Run(fmt.Sprintf("%dKiB/AssumeRanges=%v", size>>10, assume), func(t *testing.T) {
				stall := fault{stallAt: int64(size) / 3, stall: 500 * time.Millisecond}
				in := &injector{noRanges: true, plan: firstOnly(stall)}
				o := bodyHedge
				o.AssumeRanges = assume
				rt, tr := hedging(t, hedgehttp.WithBodyHedge(o))
				c, put := s3Server(t, in, rt)
				data := objectData(size)
				put("obj", data)
				if got := minioRead(t, c, "obj"); got != sha256.Sum256(data) {
					t.Fatal("the object read is not the object written")
				}
				bs := (*tr).BodyStats()
				if bs.Won != 0 {
					t.Errorf("BodyStats %+v: a hedge of a server without ranges won", bs)
				}
				if !assume && (bs.Watched != 0 || in.ranges.Load() != 0) {
					t.Errorf("BodyStats %+v, %d Range requests: want nothing watched", bs, in.ranges.Load())
				}
				if assume && (bs.Sent == 0 || bs.Dropped != bs.Sent) {
					t.Errorf("BodyStats %+v: want every Range hedge sent and dropped", bs)
				}
			})
		}
	}
}

// TestMinioRangeRead: a part of an object read with minio-go's SetRange
// (a 206 from gofakes3) that stalls is resumed within the part.
func TestMinioRangeRead(t *testing.T) {
	const size, first, last = 4 << 20, 1000, 3 << 20
	in := &injector{plan: firstOnly(fault{stallAt: 1 << 20, stall: 3 * time.Second})}
	rt, tr := hedging(t, hedgehttp.WithBodyHedge(bodyHedge))
	c, put := s3Server(t, in, rt)
	data := objectData(size)
	put("obj", data)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	opts := minio.GetObjectOptions{}
	if err := opts.SetRange(first, last); err != nil {
		t.Fatal(err)
	}
	obj, err := c.GetObject(ctx, bucket, "obj", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer obj.Close()
	h := sha256.New()
	if _, err := io.Copy(h, obj); err != nil {
		t.Fatal(err)
	}
	if [32]byte(h.Sum(nil)) != sha256.Sum256(data[first:last+1]) {
		t.Fatal("the part read is not the object's bytes first to last")
	}
	if bs := (*tr).BodyStats(); bs.Won != 1 || in.ranges.Load() != 1 {
		t.Errorf("BodyStats %+v, %d Range hedges: want 1 sent and won", bs, in.ranges.Load())
	}
}
