package commands

import (
	"errors"
	"io"
	"runtime/debug"
)

// Version prints the module version and the VCS revision it was
// built from.
func Version(w io.Writer) error {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return errors.New("no build information in the binary")
	}
	v := map[string]string{"version": bi.Main.Version, "go": bi.GoVersion}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v["revision"] = s.Value
		case "vcs.modified":
			v["modified"] = s.Value
		}
	}
	return printJSON(w, v)
}
