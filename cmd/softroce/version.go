package main

import (
	"runtime/debug"
	"strings"
)

// Version is the release version, set at build time:
//
//	go build -ldflags "-X main.Version=v0.1.0" ./cmd/softroce
var Version = "dev"

// versionString returns Version followed by the VCS revision the binary
// was built from, when the go tool recorded one (it does not with
// -buildvcs=false or outside a checkout), e.g. "dev (rev 1a2b3c4d5e6f, modified)".
func versionString() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return Version
	}
	return Version + buildSuffix(info.Settings)
}

func buildSuffix(settings []debug.BuildSetting) string {
	var rev string
	var modified bool
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return ""
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	var b strings.Builder
	b.WriteString(" (rev ")
	b.WriteString(rev)
	if modified {
		b.WriteString(", modified")
	}
	b.WriteString(")")
	return b.String()
}
