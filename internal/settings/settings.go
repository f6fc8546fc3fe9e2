// Package settings holds what the components' configurations share: the
// value types that are never logged in clear (Secret, DSN), and Walk, which
// lists the settings of a configuration struct with their YAML paths,
// environment variables, values and help texts. The YAML file, --help and
// the start-up log are all derived from the components' own Config types
// through it, so a setting is defined once, next to the code that uses it.
//
// A setting is a struct field with a yaml tag, an env tag and a help tag;
// a struct field with a yaml tag and no env tag is a group, whose envPrefix
// tag (caarlos0/env's) goes before its settings' names.
//
// Concurrency: everything here is a pure function of its arguments.
package settings

import (
	"fmt"
	"log/slog"
	"net/url"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Secret is a setting that is never logged.
type Secret string

// LogValue masks a non-empty secret.
func (s Secret) LogValue() slog.Value {
	if s == "" {
		return slog.StringValue("")
	}
	return slog.StringValue("***")
}

// DSN is a connection URL; its password is never logged.
type DSN string

// LogValue redacts the password and secret-bearing query parameters.
func (d DSN) LogValue() slog.Value {
	u, err := url.Parse(string(d))
	if err != nil {
		return slog.StringValue("***")
	}
	q := u.Query()
	for name := range q {
		switch strings.ToLower(name) {
		case "password", "sslpassword", "sslkey", "token", "key", "secret":
			q.Set(name, "xxxxx")
		}
	}
	u.RawQuery = q.Encode()
	return slog.StringValue(u.Redacted())
}

// Setting is one field of a configuration.
type Setting struct {
	// Path is the dotted YAML path, such as "cache.ttl".
	Path string
	// Env is the environment variable, such as "GATEWAY_CACHE_TTL".
	Env  string
	Help string
	// Value is the field's value.
	Value any
}

// Walk lists the settings of cfg, a struct, in field order. envPrefix goes
// before every variable name.
func Walk(cfg any, envPrefix string) []Setting {
	var out []Setting
	walk(reflect.ValueOf(cfg), "", envPrefix, &out)
	return out
}

func walk(v reflect.Value, path, env string, out *[]Setting) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		if path != "" {
			name = path + "." + name
		}
		envName, isSetting := f.Tag.Lookup("env")
		if !isSetting {
			walk(v.Field(i), name, env+f.Tag.Get("envPrefix"), out)
			continue
		}
		envName, _, _ = strings.Cut(envName, ",")
		*out = append(*out, Setting{Path: name, Env: env + envName, Help: f.Tag.Get("help"), Value: v.Field(i).Interface()})
	}
}

// String formats a setting's value as it is written in YAML and in the
// environment: durations in Go syntax, lists comma-separated, secrets
// masked.
func (s Setting) String() string {
	switch v := s.Value.(type) {
	case slog.LogValuer:
		return v.LogValue().String()
	case time.Duration:
		return v.String()
	case []string:
		return strings.Join(v, ",")
	case string:
		return v
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64)
	default:
		return fmt.Sprint(v)
	}
}

// LogValue is cfg as a log group, secrets masked.
func LogValue(cfg any) slog.Value {
	var attrs []slog.Attr
	for _, s := range Walk(cfg, "") {
		attrs = append(attrs, slog.String(s.Path, s.String()))
	}
	return slog.GroupValue(attrs...)
}
