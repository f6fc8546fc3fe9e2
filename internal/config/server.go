package config

import (
	"errors"
	"fmt"
	"net"
	"time"
)

// Server is the process's own part: listeners, data, log, shutdown.
type Server struct {
	Addr            string        `yaml:"addr" env:"ADDR" help:"public listener"`
	AdminAddr       string        `yaml:"adminAddr" env:"ADMIN_ADDR" help:"liveness, readiness, metrics and stats listener; keep it private"`
	DataDir         string        `yaml:"dataDir" env:"DATA_DIR" help:"where generated token keys (signing-keys/) and an HS256 secret are kept"`
	LogLevel        string        `yaml:"logLevel" env:"LOG_LEVEL" help:"debug, info, warn or error (anything else: info)"`
	ShutdownDelay   time.Duration `yaml:"shutdownDelay" env:"SHUTDOWN_DELAY" help:"readiness is false this long before draining"`
	ShutdownTimeout time.Duration `yaml:"shutdownTimeout" env:"SHUTDOWN_TIMEOUT" help:"drain limit for in-flight requests"`
}

func defaultServer() Server {
	return Server{Addr: ":8080", AdminAddr: "127.0.0.1:9090", DataDir: "data", LogLevel: "info", ShutdownTimeout: 15 * time.Second}
}

func (c Server) validate() error {
	var errs []error
	if c.ShutdownTimeout <= 0 {
		errs = append(errs, errors.New("server.shutdownTimeout must be positive"))
	}
	if c.ShutdownDelay < 0 {
		errs = append(errs, errors.New("server.shutdownDelay must not be negative"))
	}
	// Empty, an address listens on every interface at a port the kernel
	// picks: never what an operator meant, least of all for the admin one.
	for _, l := range []struct{ name, addr string }{{"server.addr", c.Addr}, {"server.adminAddr", c.AdminAddr}} {
		if _, _, err := net.SplitHostPort(l.addr); err != nil {
			errs = append(errs, fmt.Errorf("%s must be host:port or :port, not %q", l.name, l.addr))
		}
	}
	return errors.Join(errs...)
}
