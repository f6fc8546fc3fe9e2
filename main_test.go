package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/realty-gateway/gateway/internal/commands"
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

// TestHelpListsEveryCommand: --help names every command, and each
// two-word command is dispatched to its own (its -h does not get the
// binary's usage).
func TestHelpListsEveryCommand(t *testing.T) {
	env := map[string]string{"GATEWAY_CONFIG": "/nonexistent"}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"--help"}, env, nil, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	cmdEnv := map[string]string{"GATEWAY_DATA_DIR": t.TempDir()} // the built-in configuration
	for _, cmd := range []string{"serve", "version", "healthcheck", "firm add", "firm rotate-key", "user add", "user disable",
		"user enable", "token revoke", "listing import", "cdn purge", "cache purge",
		"signing-key add", "signing-key activate", "signing-key retire", "signing-key list"} {
		if !strings.Contains(out.String(), "gateway "+cmd) && !strings.Contains(out.String(), "gateway ["+cmd+"]") {
			t.Errorf("--help does not list %q", cmd)
		}
		words := strings.Fields(cmd)
		if len(words) != 2 {
			continue
		}
		var usage commands.UsageError
		err := run(context.Background(), append(words, "-h"), cmdEnv, strings.NewReader(""), io.Discard, io.Discard)
		if errors.As(err, &usage) && strings.HasPrefix(string(usage), "usage:\n") {
			t.Errorf("%s -h: the binary's usage, not the command's own", cmd)
		}
	}
}
