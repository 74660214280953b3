package cli

import (
	"runtime/debug"
)

// buildVersion is what --version prints: the module version and the VCS
// commit the binary was built from, as the Go toolchain stamped them.
func buildVersion() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build information in the binary)"
	}
	return versionOf(info)
}

// versionOf formats the version recorded in info.
func versionOf(info *debug.BuildInfo) string {
	v := info.Main.Version
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	var rev, when string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev == "" {
		return v + ", commit unknown (built without VCS information)"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	out := v + ", commit " + rev
	if modified {
		out += " with local changes"
	}
	if when != "" {
		out += " (" + when + ")"
	}
	return out
}
