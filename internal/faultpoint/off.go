//go:build !faultpoints

package faultpoint

// Hit does nothing in a normal build.
func Hit(Point) {}
