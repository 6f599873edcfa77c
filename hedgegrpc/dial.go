package hedgegrpc

import (
	"encoding/json"
	"strings"

	"github.com/tailcut/tailcut"
	"google.golang.org/grpc"
)

// DialOptions returns the dial options that hedge a ClientConn's calls and
// streams under policy p and the service config serviceConfig (JSON, gRFC
// A6), given once: grpc.WithDefaultServiceConfig with the config, the
// [BalancerName] balancer added when the config names no load-balancing
// policy (so that hedges go to other backends than their originals), and
// the unary and stream interceptors of this package with
// [WithServiceConfig] and opts, and [StartSignal] when opts hold
// [WithTied]. A config that names another policy keeps
// it; the interceptors then warn once if hedges can only reach their
// original's backend (see [WithLogger]).
//
// A service config the ClientConn's resolver delivers (DNS, xDS) replaces
// this default for grpc-go and, under the [BalancerName] balancer, for the
// interceptors too.
//
// A nil p means one policy for both interceptors, made as
// [UnaryClientInterceptor] makes it for this config. An invalid config is
// an error naming the field (see [ParseServiceConfig]).
func DialOptions(p *tailcut.Policy, serviceConfig string, opts ...Option) ([]grpc.DialOption, error) {
	sc, err := ParseServiceConfig([]byte(serviceConfig))
	if err != nil {
		return nil, err
	}
	js, err := withBalancer(serviceConfig)
	if err != nil {
		return nil, err
	}
	if p == nil {
		p = defaultPolicy(sc)
	}
	opts = append(opts[:len(opts):len(opts)], WithServiceConfig(sc))
	dopts := []grpc.DialOption{
		grpc.WithDefaultServiceConfig(js),
		grpc.WithChainUnaryInterceptor(UnaryClientInterceptor(p, opts...)),
		grpc.WithChainStreamInterceptor(StreamClientInterceptor(p, opts...)),
	}
	if newClient(p, opts).tied != nil {
		dopts = append(dopts, StartSignal())
	}
	return dopts, nil
}

// withBalancer returns the service config js with the [BalancerName]
// balancer as its loadBalancingConfig, unless it names a load-balancing
// policy already: a field grpc-go reads as loadBalancingConfig or the older
// loadBalancingPolicy (encoding/json matches its field names in any case).
func withBalancer(js string) (string, error) {
	root, err := object([]byte(js), "service config")
	if err != nil {
		return "", err
	}
	for name := range root {
		if strings.EqualFold(name, "loadBalancingConfig") || strings.EqualFold(name, "loadBalancingPolicy") {
			return js, nil
		}
	}
	root["loadBalancingConfig"] = json.RawMessage(`[{"` + BalancerName + `": {}}]`)
	b, err := json.Marshal(root)
	return string(b), err
}
