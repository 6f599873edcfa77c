module github.com/tailcut/tailcut/cmd/tailcut

go 1.26.0

toolchain go1.26.10

replace github.com/tailcut/tailcut => ../..

replace github.com/tailcut/tailcut/lab => ../../lab

replace github.com/tailcut/tailcut/proxy => ../../proxy

replace github.com/tailcut/tailcut/fleet => ../../fleet

replace github.com/tailcut/tailcut/hedgehttp/idemredis => ../../hedgehttp/idemredis

replace github.com/tailcut/tailcut/hedgeprom => ../../hedgeprom

replace github.com/tailcut/tailcut/internal/redisconn => ../../internal/redisconn

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0
	github.com/prometheus/common v0.74.0
	github.com/schollz/progressbar/v3 v3.19.1
	github.com/spf13/cobra v1.10.2
	github.com/tailcut/tailcut v0.0.0-00010101000000-000000000000
	github.com/tailcut/tailcut/lab v0.0.0-00010101000000-000000000000
	github.com/tailcut/tailcut/proxy v0.0.0-00010101000000-000000000000
	github.com/tsenart/vegeta/v12 v12.13.0
	go.uber.org/goleak v1.3.0
	golang.org/x/term v0.48.0
)

require (
	codeberg.org/go-fonts/liberation v0.5.0 // indirect
	codeberg.org/go-latex/latex v0.2.0 // indirect
	codeberg.org/go-pdf/fpdf v0.11.1 // indirect
	git.sr.ht/~sbinet/gg v0.7.0 // indirect
	github.com/DataDog/sketches-go v1.4.8 // indirect
	github.com/ajstarks/svgo v0.0.0-20211024235047-1546f124cd8b // indirect
	github.com/beorn7/perks v1.0.1 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/golang/freetype v0.0.0-20170609003504-e2365dfdc4a0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/influxdata/tdigest v0.0.1 // indirect
	github.com/josharian/intern v1.0.0 // indirect
	github.com/mailru/easyjson v0.7.7 // indirect
	github.com/mitchellh/colorstring v0.0.0-20190213212951-d06e56a500db // indirect
	github.com/munnerz/goautoneg v0.0.0-20191010083416-a7dc8b61c822 // indirect
	github.com/pandatix/go-abnf v0.5.5 // indirect
	github.com/prometheus/client_golang v1.25.0 // indirect
	github.com/prometheus/client_model v0.6.3 // indirect
	github.com/prometheus/procfs v0.22.0 // indirect
	github.com/redis/go-redis/v9 v9.23.0 // indirect
	github.com/rivo/uniseg v0.4.7 // indirect
	github.com/rs/dnscache v0.0.0-20230804202142-fc85eb664529 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	github.com/tailcut/tailcut/fleet v0.0.0-00010101000000-000000000000 // indirect
	github.com/tailcut/tailcut/hedgehttp/idemredis v0.0.0-00010101000000-000000000000 // indirect
	github.com/tailcut/tailcut/hedgeprom v0.0.0-00010101000000-000000000000 // indirect
	github.com/tailcut/tailcut/internal/redisconn v0.0.0-00010101000000-000000000000 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/image v0.30.0 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.50.0 // indirect
	golang.org/x/text v0.43.0 // indirect
	golang.org/x/time v0.16.0 // indirect
	gonum.org/v1/plot v0.17.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
