package hedgegrpc

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tailcut/tailcut"
	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

func TestDefaultFeatures(t *testing.T) {
	f := DefaultFeatures("/pkg.S/Get", &testpb.SimpleRequest{Payload: &testpb.Payload{Body: make([]byte, 2000)}})
	g := DefaultFeatures("/m", "not proto")
	if got := strings.Join(f.Labels(), "|"); got != "/pkg.S/Get|size:<4KiB" {
		t.Errorf("labels %q", got)
	}
	if got := g.Labels(); got[1] != "size:?" {
		t.Errorf("non-proto request: %q", got)
	}
}

// A predictive policy's calls begin with the method and size labels,
// followed by the context's; a policy that is not predictive sees none.
func TestInterceptorFeatures(t *testing.T) {
	invoker := func(ctx context.Context, method string, req, rep any, cc *grpc.ClientConn, opts ...grpc.CallOption) error {
		return nil
	}
	ctx := tailcut.WithFeatures(context.Background(), tailcut.Features{}.With("tenant:a"))
	for _, predictive := range []bool{true, false} {
		p := mustPolicy(t, tailcut.Config{Predictive: predictive})
		ic := UnaryClientInterceptor(p)
		for _, maxHedges := range []bool{false, true} {
			c := ctx
			var opts []grpc.CallOption
			if maxHedges {
				opts = append(opts, WithoutHedging()) // the single-attempt path
			}
			if err := ic(c, "/pkg.S/Get", &testpb.Empty{}, &testpb.Empty{}, nil, invoker, opts...); err != nil {
				t.Fatal(err)
			}
		}
		bs := p.Buckets("/pkg.S/Get", time.Now())
		switch {
		case predictive && (len(bs) != 1 || strings.Join(bs[0].Labels, "|") != "/pkg.S/Get|size:0|tenant:a" || bs[0].Current != 2):
			t.Errorf("predictive: buckets %+v, want one of /pkg.S/Get|size:0|tenant:a with both calls", bs)
		case !predictive && len(bs) != 0:
			t.Errorf("not predictive: buckets %+v", bs)
		}
	}
}
