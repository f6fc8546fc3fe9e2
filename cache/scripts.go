package cache

import (
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts the Redis tier runs. Each names its keys and arguments:
// newScript binds every name to its position in the script's first
// lines, so a body refers to names only and no script reads another's
// positions; a caller passes its values in the order declared here. A
// record's header is read in one place, header.

// luaScript is a script and its source, for the callers that send it with
// EVAL without waiting for the answer.
type luaScript struct {
	*redis.Script
	src string
}

// newScript is the script of keys and args, named, then body's parts.
func newScript(keys, args []string, body ...string) luaScript {
	var b strings.Builder
	for i, k := range keys {
		fmt.Fprintf(&b, "local %s = KEYS[%d]\n", k, i+1)
	}
	for i, a := range args {
		fmt.Fprintf(&b, "local %s = ARGV[%d]\n", a, i+1)
	}
	b.WriteString(headerLua)
	for _, part := range body {
		b.WriteString(part)
	}
	return luaScript{Script: redis.NewScript(b.String()), src: b.String()}
}

// headerLua reads a record's revision, and with tag its entity tag, from
// its first line (record.encode); nil for a value that is no record.
const headerLua = `
local function header(v, tag)
  if tag then
    local rev, etag = string.match(v, '^v1 (%d+) %S+ %S+ %S+ %S+ %a (%S+)')
    return tonumber(rev), etag
  end
  return tonumber(string.match(v, '^v1 (%d+) '))
end
`

// thenEnd runs a write's body, then end (a lease's end), and answers what
// the body answered.
func thenEnd(body, end string) []string {
	return []string{"local function write()\n", body, "end\nlocal res = write()\n", end, "return res\n"}
}

// guardedSetLua writes value with a PX of ttl unless the key holds a
// record whose revision is greater than revision. One key per call, so
// the two keys of a listing may live in different Redis Cluster slots.
const guardedSetLua = `
local cur = redis.call('GET', key)
if cur then
  local rev = header(cur)
  if rev and rev > tonumber(revision) then
    return 0
  end
end
redis.call('SET', key, value, 'PX', ttl)
return 1
`

// refreshOrFloorLua brings a cached copy up to date: a key that holds an
// older revision (a listing, an absence or a floor) gets value for ttl
// ms; a key that holds nothing gets floor for floorTTL ms, so that a read
// of the old version in flight cannot fill it, without filling Redis with
// listings nobody reads. A key that holds this revision or a newer one is
// left alone.
const refreshOrFloorLua = `
local cur = redis.call('GET', key)
if cur then
  local rev = header(cur)
  if rev and rev >= tonumber(revision) then
    return 0
  end
  redis.call('SET', key, value, 'PX', ttl)
  return 1
end
redis.call('SET', key, floor, 'PX', floorTTL)
return 2
`

// getOrLeaseLua returns the key's value, or where it is empty takes the
// lease for token for leaseTTL ms and returns 1; where another holds the
// lease, it marks the lease waited for (a '+' after the token) and
// returns 0. Only a waited-for lease's end is published: a miss that
// nobody else wanted wakes no gateway.
const getOrLeaseLua = `
local v = redis.call('GET', key)
if v then
  return v
end
if redis.call('SET', lease, token, 'NX', 'PX', leaseTTL) then
  return 1
end
redis.call('APPEND', lease, '+')
return 0
`

// endLeaseLua ends the lease where it is still token's, and publishes the
// key on channel where a gateway waits for it.
const endLeaseLua = `
local held = redis.call('GET', lease)
if held and string.sub(held, 1, #token) == token then
  redis.call('DEL', lease)
  if #held > #token then
    redis.call('PUBLISH', channel, key)
  end
end
`

// endAnyLeaseLua ends whatever lease the key has, and publishes the key
// on channel where a gateway waits for it: a write ends the lease of the
// key it writes.
const endAnyLeaseLua = `
local held = redis.call('GET', lease)
if held then
  redis.call('DEL', lease)
  if string.sub(held, -1) == '+' then
    redis.call('PUBLISH', channel, key)
  end
end
`

// addVariantsLua replaces a key's record with value, which carries more
// variants, where the key still holds the version of revision and etag;
// the key's expiry stays. One key per call, so the keys may live in
// different Cluster slots.
const addVariantsLua = `
local cur = redis.call('GET', key)
if not cur then
  return 0
end
local rev, tag = header(cur, true)
if rev ~= tonumber(revision) or tag ~= etag then
  return 0
end
redis.call('SET', key, value, 'KEEPTTL')
return 1
`

// The scripts, with their keys and arguments in the order callers pass
// them. The ones that write a key and end its lease are the holder's fill
// (guardedSetRelease, which ends its own lease), and writes and the
// feed's changes, which end whoever's lease it is.
var (
	guardedSet                = newScript([]string{"key"}, []string{"value", "revision", "ttl"}, guardedSetLua)
	refreshOrFloor            = newScript([]string{"key"}, []string{"value", "revision", "ttl", "floor", "floorTTL"}, refreshOrFloorLua)
	guardedSetRelease         = newScript([]string{"key", "lease"}, []string{"value", "revision", "ttl", "token", "channel"}, thenEnd(guardedSetLua, endLeaseLua)...)
	guardedSetEndingLease     = newScript([]string{"key", "lease"}, []string{"value", "revision", "ttl", "channel"}, thenEnd(guardedSetLua, endAnyLeaseLua)...)
	refreshOrFloorEndingLease = newScript([]string{"key", "lease"}, []string{"value", "revision", "ttl", "floor", "floorTTL", "channel"}, thenEnd(refreshOrFloorLua, endAnyLeaseLua)...)
	getOrLease                = newScript([]string{"key", "lease"}, []string{"token", "leaseTTL"}, getOrLeaseLua)
	releaseLease              = newScript([]string{"key", "lease"}, []string{"token", "channel"}, endLeaseLua, "return 1\n")
	addVariants               = newScript([]string{"key"}, []string{"revision", "etag", "value"}, addVariantsLua)
)
