# Varnish 7 in front of the realty gateway in CDN mode
# (GATEWAY_CDN_MODE=true, GATEWAY_CDN_PURGE_FORMAT=varnish-xkey,
# GATEWAY_CDN_PURGE_URL=http://<this varnish>/, GATEWAY_CDN_ORIGIN_SECRET).
# Needs the xkey vmod (Debian: varnish-modules). deploy/cdn/varnish_test.go
# runs this file against a real gateway.
vcl 4.1;

import std;
import xkey;

backend default {
    .host = "127.0.0.1";
    .port = "8080";
    # A token-less request is 401 whatever the path: that answer means the
    # gateway is up. While the probe fails, stale copies are served for
    # their stale-if-error.
    .probe = {
        .url = "/realty/probe";
        .expected_response = 401;
        .interval = 1s;
        .timeout = 500ms;
        .window = 3;
        .threshold = 2;
    }
}

# Who may purge: the gateways. Add their addresses.
acl purgers {
    "127.0.0.1";
    "::1";
}

sub vcl_recv {
    if (req.method == "PURGE") {
        if (client.ip !~ purgers) {
            return (synth(403, "Forbidden"));
        }
        # Optional shared secret, for purgers beyond the ACL: set the
        # gateway's GATEWAY_CDN_PURGE_HEADER to "X-Purge-Secret: <secret>".
        # if (req.http.X-Purge-Secret != "<secret>") { return (synth(403, "Forbidden")); }
        if (req.http.xkey-purge) {
            return (synth(200, "Purged " + xkey.purge(req.http.xkey-purge)));
        }
        if (req.http.xkey-softpurge) {
            return (synth(200, "Soft-purged " + xkey.softpurge(req.http.xkey-softpurge)));
        }
        return (synth(400, "xkey-purge or xkey-softpurge header required"));
    }
    if (req.url ~ "^/realty/") {
        # Query strings are never part of a listing.
        set req.url = regsub(req.url, "\?.*$", "");
        if (req.method != "GET" && req.method != "HEAD") {
            return (pass);
        }
        # A second pass, after a copy past stale-while-revalidate was found
        # while the gateway is healthy: no stale copy then.
        if (req.http.X-Fresh-Only) {
            set req.grace = 0s;
        }
        # Shared whatever the Authorization: the gateway marks what is
        # public, and answers private to anything else (never stored below).
        return (hash);
    }
}

sub vcl_hash {
    hash_data(req.url);
    return (lookup);
}

sub vcl_hit {
    if (obj.ttl >= 0s) {
        return (deliver);
    }
    # Within stale-while-revalidate: served while it is fetched again.
    if (obj.ttl + std.duration(obj.http.X-Stale-While-Revalidate + "s", 0s) > 0s) {
        return (deliver);
    }
    # Past it, stale only while the gateway is down (stale-if-error).
    if (!std.healthy(req.backend_hint)) {
        return (deliver);
    }
    if (req.restarts == 0) {
        set req.http.X-Fresh-Only = "1";
        return (restart);
    }
    return (deliver);
}

sub vcl_backend_fetch {
    # The CDN's own fetches (revalidation, pre-warming, a visitor without a
    # token) may read active listings: the gateway's
    # GATEWAY_CDN_ORIGIN_SECRET. A visitor's token, if any, wins there.
    set bereq.http.X-Origin-Auth = "CHANGE-ME-origin-secret-of-at-least-32-bytes";
    unset bereq.http.X-Fresh-Only;
}

sub vcl_backend_response {
    if (bereq.url ~ "^/realty/") {
        # private, no-store, errors: never shared (remembered as "do not
        # cache" for a moment).
        if (beresp.http.Cache-Control ~ "(private|no-store)" || beresp.status >= 300 && beresp.status != 304) {
            set beresp.uncacheable = true;
            set beresp.ttl = 1s;
            return (deliver);
        }
        # The edge's rules come in CDN-Cache-Control (RFC 9213): its
        # max-age is the TTL; the grace is the longer of
        # stale-while-revalidate and stale-if-error, and vcl_hit tells them
        # apart. Cache-Control is the browsers': it carries none of them.
        # (A gateway of a release before CDN-Cache-Control put them in
        # Cache-Control, with s-maxage, which Varnish reads by itself.)
        if (beresp.http.CDN-Cache-Control) {
            set beresp.http.X-Edge-Rules = beresp.http.CDN-Cache-Control;
            set beresp.ttl = std.duration(regsub(beresp.http.X-Edge-Rules, "^(.*[ ,])?max-age=([0-9]+).*$", "\2") + "s", 0s);
        } else {
            set beresp.http.X-Edge-Rules = beresp.http.Cache-Control;
        }
        set beresp.http.X-Stale-While-Revalidate = regsub(beresp.http.X-Edge-Rules, "^.*stale-while-revalidate=([0-9]+).*$", "\1");
        set beresp.grace = std.duration(regsub(beresp.http.X-Edge-Rules, "^.*stale-if-error=([0-9]+).*$", "\1") + "s", 0s);
        if (std.duration(beresp.http.X-Stale-While-Revalidate + "s", 0s) > beresp.grace) {
            set beresp.grace = std.duration(beresp.http.X-Stale-While-Revalidate + "s", 0s);
        }
        unset beresp.http.X-Edge-Rules;
        # Compressed listings: Varnish asks the gateway for gzip
        # (http_gzip_support, on by default: it sends Accept-Encoding: gzip
        # on its fetches), stores the gzip body and its "<tag>.gz" ETag,
        # and gunzips it for a client that does not take gzip. The
        # gateway's Vary: Accept-Encoding, on Varnish's normalized
        # Accept-Encoding, keeps at most two objects per listing, both
        # tagged, so one xkey purge drops both.
        # xkey reads the tags from the xkey header.
        set beresp.http.xkey = beresp.http.Surrogate-Key;
    }
}

sub vcl_deliver {
    # RFC 9211: each cache adds its own entry, after the origin's.
    if (obj.hits > 0) {
        set resp.http.Cache-Status = resp.http.Cache-Status + ", varnish; hit; ttl=" + obj.ttl;
    } else {
        set resp.http.Cache-Status = resp.http.Cache-Status + ", varnish; fwd=miss";
    }
    unset resp.http.xkey;
    unset resp.http.Surrogate-Key;
    unset resp.http.Cache-Tag;
    unset resp.http.X-Stale-While-Revalidate;
    # The edge's rules are for this cache: a browser ignores them anyway.
    unset resp.http.CDN-Cache-Control;
}
