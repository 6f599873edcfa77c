package proxy

import (
	"fmt"
	"net"
	"strings"
)

// Warnings lists the settings of c that are valid but unsafe in most
// deployments, each as a sentence naming the field: tailcut proxy --check
// prints them and the proxy logs them when it starts.
//
//   - an admin listener reachable beyond this host: /metrics and
//     /debug/tailcut show routes, upstream URLs and traffic, and are
//     served without authentication;
//   - paths.semicolons: data, which lets /public/..;/private out of a
//     route for /public/ behind a servlet container.
func (c *Config) Warnings() []string {
	var w []string
	if a := c.adminListen(); a != "" && !loopback(a) {
		w = append(w, fmt.Sprintf("admin.listen: %q is reachable beyond this host, and /metrics and /debug/tailcut (routes, upstream URLs, traffic) have no authentication: bind it to 127.0.0.1 or [::1], or turn it off", a))
	}
	if c.Paths.Semicolons == SemicolonsData {
		w = append(w, `paths.semicolons: data forwards "..;" segments as they came, which servlet containers (Tomcat, Jetty) and Spring read as "..": behind one, /public/..;/private leaves a route for /public/`)
	}
	return w
}

// loopback reports whether the listen address a (host:port, validated)
// binds loopback only.
func loopback(a string) bool {
	host, _, err := net.SplitHostPort(a)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
