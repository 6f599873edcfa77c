module github.com/tailcut/tailcut

go 1.26.0

require (
	github.com/DataDog/sketches-go v1.4.8
	golang.org/x/time v0.16.0
)

require google.golang.org/protobuf v1.36.11 // indirect
