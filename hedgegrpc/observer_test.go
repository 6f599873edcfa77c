package hedgegrpc

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

func TestWithObserverNil(t *testing.T) {
	uic := UnaryClientInterceptor(nil, WithObserver(nil))
	err := uic(t.Context(), unaryMethod, &testpb.SimpleRequest{}, &testpb.SimpleResponse{}, nil, func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error {
		return errors.New("invoker called")
	})
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "WithObserver") {
		t.Errorf("err %v, want INTERNAL naming WithObserver", err)
	}
}
