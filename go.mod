module github.com/softroce/softroce

go 1.26.8

require (
	github.com/gopacket/gopacket v1.7.7
	github.com/stretchr/testify v1.12.1
)

require (
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/net v0.62.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)
