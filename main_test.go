package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/realty-gateway/gateway/internal/config"
	"github.com/realty-gateway/gateway/internal/settings"
)

func TestHelpListsEverySetting(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, map[string]string{"GATEWAY_CONFIG": "/nonexistent"}, nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, s := range settings.Walk(config.Defaults(), config.EnvPrefix) {
		if !strings.Contains(out.String(), s.Env+" ") {
			t.Errorf("--help does not list %s", s.Env)
		}
	}
}
