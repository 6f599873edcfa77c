module github.com/tailcut/tailcut/proxy

go 1.26.0

replace github.com/tailcut/tailcut => ..

replace github.com/tailcut/tailcut/fleet => ../fleet

replace github.com/tailcut/tailcut/hedgehttp/idemredis => ../hedgehttp/idemredis

replace github.com/tailcut/tailcut/hedgeprom => ../hedgeprom

replace github.com/tailcut/tailcut/internal/redisconn => ../internal/redisconn

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/prometheus/client_golang v1.25.0
	github.com/tailcut/tailcut v0.0.0-00010101000000-000000000000
	github.com/tailcut/tailcut/fleet v0.0.0-00010101000000-000000000000
	github.com/tailcut/tailcut/hedgehttp/idemredis v0.0.0-00010101000000-000000000000
	github.com/tailcut/tailcut/hedgeprom v0.0.0-00010101000000-000000000000
	github.com/tailcut/tailcut/internal/redisconn v0.0.0-00010101000000-000000000000
	go.yaml.in/yaml/v3 v3.0.6
	golang.org/x/net v0.62.0
)

require (
	github.com/DataDog/sketches-go v1.4.8 // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/kylelemons/godebug v1.1.0 // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/pandatix/go-abnf v0.5.5 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/common v0.74.0 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	golang.org/x/time v0.16.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
