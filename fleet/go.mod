module github.com/tailcut/tailcut/fleet

go 1.26.0

replace github.com/tailcut/tailcut => ..

replace github.com/tailcut/tailcut/internal/redisconn => ../internal/redisconn

require (
	github.com/alicebob/miniredis/v2 v2.40.0
	github.com/redis/go-redis/v9 v9.23.0
	github.com/tailcut/tailcut v0.0.0-00010101000000-000000000000
	github.com/tailcut/tailcut/internal/redisconn v0.0.0-00010101000000-000000000000
	go.yaml.in/yaml/v3 v3.0.6
)

require (
	github.com/DataDog/sketches-go v1.4.8 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/yuin/gopher-lua v1.1.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
	golang.org/x/time v0.16.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
