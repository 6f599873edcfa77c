package redisconn

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestValidate(t *testing.T) {
	for _, tt := range []struct {
		c    Conn
		want string // with pkg "p" and prefix "R."; empty: valid
	}{
		{Conn{Addrs: []string{"h:1"}}, ""},
		{Conn{Addrs: []string{"h:1", "h:2"}, Cluster: true}, ""},
		{Conn{Addrs: []string{"h:1"}, DB: 3}, ""},
		{Conn{}, "p: R.Addrs is empty"},
		{Conn{Addrs: []string{"h:1", "h:2"}}, "p: R.Addrs has 2 addresses; several need R.Cluster"},
		{Conn{Addrs: []string{"h:1"}, DB: -1}, "p: R.DB must not be negative, got -1"},
		{Conn{Addrs: []string{"h:1"}, Cluster: true, DB: 1}, "p: R.DB must be 0 with R.Cluster, got 1"},
		{Conn{Addrs: []string{"h:1", ""}, Cluster: true}, "p: R.Addrs has an empty address"},
	} {
		err := tt.c.Validate("p", "R.")
		if got := ""; err != nil {
			got = err.Error()
			if got != tt.want {
				t.Errorf("Validate(%+v) = %q, want %q", tt.c, got, tt.want)
			}
		} else if tt.want != "" {
			t.Errorf("Validate(%+v) = nil, want %q", tt.c, tt.want)
		}
	}
}

func TestClient(t *testing.T) {
	c := Conn{Addrs: []string{"127.0.0.1:1"}, Username: "u", Password: "pw", DB: 2}
	single := c.Client(Tuning{PoolSize: 4, Timeout: 3 * time.Second})
	defer single.Close()
	o := single.(*redis.Client).Options()
	if o.Addr != "127.0.0.1:1" || o.Username != "u" || o.Password != "pw" || o.DB != 2 || o.PoolSize != 4 ||
		o.DialTimeout != 3*time.Second || o.ReadTimeout != 3*time.Second || o.WriteTimeout != 3*time.Second ||
		!o.ContextTimeoutEnabled || o.MaxRetries != 1 || o.DialerRetries != 1 {
		t.Errorf("single-server options %+v", o)
	}

	// A cluster is one even with a single seed address.
	c = Conn{Addrs: []string{"127.0.0.1:1"}, Cluster: true, Username: "u", Password: "pw"}
	cluster := c.Client(Tuning{})
	defer cluster.Close()
	cc, ok := cluster.(*redis.ClusterClient)
	if !ok {
		t.Fatalf("Cluster with one address: a %T, want a *redis.ClusterClient", cluster)
	}
	co := cc.Options()
	if len(co.Addrs) != 1 || co.Username != "u" || co.Password != "pw" || !co.ContextTimeoutEnabled ||
		co.MaxRetries != 1 || co.DialerRetries != 1 || co.PoolSize <= 0 || co.ReadTimeout <= 0 || co.DialTimeout <= 0 {
		t.Errorf("cluster options %+v (zero Tuning: go-redis's defaults)", co)
	}
}
