module github.com/tailcut/tailcut

go 1.26.0

require (
	github.com/DataDog/sketches-go v1.4.8
	go.uber.org/goleak v1.3.0
	golang.org/x/net v0.60.0
	golang.org/x/time v0.16.0
)

require (
	github.com/stretchr/testify v1.12.1 // indirect
	go.yaml.in/yaml/v3 v3.0.6 // indirect
	golang.org/x/text v0.42.0 // indirect
	google.golang.org/protobuf v1.36.12 // indirect
)
