package adminserver

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Healthcheck asks the admin listener at addr whether the process is live,
// for a container's HEALTHCHECK (distroless images have no curl). A
// listener on every interface is asked on the loopback.
func Healthcheck(ctx context.Context, addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("admin address %q: %w", addr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/livez", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("healthcheck: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("healthcheck: /livez answered %d", resp.StatusCode)
	}
	return nil
}
