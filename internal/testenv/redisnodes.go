package testenv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// freeRedisPort returns a free 127.0.0.1 port whose cluster bus port
// (port+10000) is free too.
func freeRedisPort(t testing.TB) int {
	t.Helper()
	for range 100 {
		port := 20000 + rand.IntN(20000)
		ok := true
		for _, p := range []int{port, port + 10000} {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				ok = false
				break
			}
			ln.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no free port pair for a Redis node")
	return 0
}

// redisServer starts redis-server in its own directory, with args after
// the common ones (or as a sentinel), and kills it at the end of the test.
// It returns the node's address. A port taken between being found free and
// being bound costs a retry on another port, not the test.
func redisServer(t testing.TB, name string, sentinel bool, args ...string) string {
	t.Helper()
	return startRedisNode(t, name, sentinel, args).Addr
}

// RedisNode is a redis-server of a test's own, which the test may kill
// and start again on the same address.
type RedisNode struct {
	Addr string
	// Dir is its working directory, where it writes dump.rdb.
	Dir string

	t      testing.TB
	name   string
	bin    string
	args   []string // all of them, the port included
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartRedis starts a redis-server of the test's own (no persistence
// unless args ask for it) and kills it at the end of the test.
func StartRedis(t testing.TB, name string, args ...string) *RedisNode {
	t.Helper()
	return startRedisNode(t, name, false, args)
}

func startRedisNode(t testing.TB, name string, sentinel bool, args []string) *RedisNode {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		unavailable(t, "redis-server binary", err)
	}
	dir := filepath.Join(t.TempDir(), name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	logFile := filepath.Join(dir, "redis.log")
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("%s log:\n%s", name, tail(string(b), 4000))
		}
	})
	n := &RedisNode{Dir: dir, t: t, name: name, bin: bin}
	t.Cleanup(n.Kill)
	for range 5 {
		port := freeRedisPort(t)
		var all []string
		if sentinel {
			// A sentinel rewrites its configuration file, which must come first.
			conf := filepath.Join(dir, "sentinel.conf")
			if err := os.WriteFile(conf, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			all = []string{conf, "--sentinel"}
		} else {
			all = []string{"--save", "", "--appendonly", "no"}
		}
		all = append(all, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--dir", dir, "--logfile", logFile)
		n.Addr, n.args = "127.0.0.1:"+strconv.Itoa(port), append(all, args...)
		if n.start() {
			return n
		}
	}
	t.Fatalf("%s did not start on any of 5 free ports", name)
	return nil
}

// start runs the server and reports whether it answers as itself.
func (n *RedisNode) start() bool {
	n.t.Helper()
	n.cmd = exec.Command(n.bin, n.args...)
	if err := n.cmd.Start(); err != nil {
		n.t.Fatalf("start %s: %v", n.name, err)
	}
	n.exited = make(chan struct{})
	go func(cmd *exec.Cmd, exited chan struct{}) { _ = cmd.Wait(); close(exited) }(n.cmd, n.exited)
	return ours(n.t, n.name, n.Addr, n.cmd.Process.Pid, n.exited)
}

// Kill ends the server with SIGKILL and waits for it: nothing is saved.
func (n *RedisNode) Kill() {
	if n.cmd != nil {
		_ = n.cmd.Process.Kill()
		<-n.exited
	}
}

// Pause stops the server (SIGSTOP): it keeps its connections and answers
// nothing, as a stalled fork or a blackholed network does. Resume ends it.
func (n *RedisNode) Pause() { n.signal(syscall.SIGSTOP) }

// Resume lets a paused server run again (SIGCONT).
func (n *RedisNode) Resume() { n.signal(syscall.SIGCONT) }

func (n *RedisNode) signal(sig syscall.Signal) {
	n.t.Helper()
	if err := n.cmd.Process.Signal(sig); err != nil {
		n.t.Fatalf("%s: %v", n.name, err)
	}
}

// Restart starts the killed server again on its address, with what its
// directory holds.
func (n *RedisNode) Restart() {
	n.t.Helper()
	if !n.start() {
		n.t.Fatalf("%s did not start again on %s", n.name, n.Addr)
	}
}

// ours waits up to Patience until the server at addr answers as process pid,
// and reports false if that process exited first (its port was taken).
func ours(t testing.TB, name, addr string, pid int, exited <-chan struct{}) bool {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(Patience())
	for {
		select {
		case <-exited:
			return false
		default:
		}
		info, err := rdb.Info(context.Background(), "server").Result()
		if err == nil && strings.Contains(info, "process_id:"+strconv.Itoa(pid)+"\r\n") {
			return true
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s does not answer at %s: %v", name, addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitUntil polls cond every 20 ms until it holds, failing the test after
// Patience.
func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	poll(t, what, 20*time.Millisecond, cond)
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// RedisCluster starts a cluster of n masters without replicas on free
// ports (redis-server --cluster-enabled yes, then redis-cli --cluster
// create), waits until every node reports cluster_state:ok, and stops the
// nodes at the end of the test. It returns the node addresses.
func RedisCluster(t testing.TB, n int) []string {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		unavailable(t, "redis-cli binary", err)
	}
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = redisServer(t, fmt.Sprintf("cluster-%d", i), false, "--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000")
	}
	args := append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.Command("redis-cli", args...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	for _, addr := range addrs {
		rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
		waitUntil(t, addr+" cluster_state:ok", func() bool {
			info, err := rdb.ClusterInfo(context.Background()).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok")
		})
		rdb.Close()
	}
	return addrs
}

// Sentinel is a master, one replica of it and the sentinels watching it,
// all local.
type Sentinel struct {
	Addr       string   // the first sentinel's
	Addrs      []string // every sentinel's
	MasterName string
	Master     string
	Replica    string
	// MasterNode is the master's server, which a test may kill.
	MasterNode *RedisNode
}

// RedisSentinel starts a master, a replica and a sentinel (quorum 1) on
// free ports, waits until the sentinel knows the replica, and stops all
// three at the end of the test.
func RedisSentinel(t testing.TB) Sentinel {
	t.Helper()
	return RedisSentinels(t, 1)
}

// RedisSentinels is RedisSentinel with n sentinels and a quorum of a
// majority of them.
func RedisSentinels(t testing.TB, n int) Sentinel {
	t.Helper()
	s := Sentinel{MasterName: "gateway"}
	s.MasterNode = startRedisNode(t, "master", false, []string{"--repl-diskless-sync-delay", "0"})
	s.Master = s.MasterNode.Addr
	host, port, _ := net.SplitHostPort(s.Master)
	s.Replica = redisServer(t, "replica", false, "--replicaof", host, port)
	ctx := context.Background()
	for i := range n {
		addr := redisServer(t, fmt.Sprintf("sentinel-%d", i), true)
		s.Addrs = append(s.Addrs, addr)
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
		for _, cmd := range [][]any{
			{"sentinel", "monitor", s.MasterName, host, port, strconv.Itoa(n/2 + 1)},
			{"sentinel", "set", s.MasterName, "down-after-milliseconds", "1000"},
			{"sentinel", "set", s.MasterName, "failover-timeout", "5000"},
		} {
			if err := sc.Process(ctx, redis.NewStatusCmd(ctx, cmd...)); err != nil {
				t.Fatalf("%v: %v", cmd, err)
			}
		}
		sc.Close()
	}
	s.Addr = s.Addrs[0]
	for _, addr := range s.Addrs {
		sc := redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1})
		waitUntil(t, "the sentinel knows the replica and the other sentinels", func() bool {
			replicas, err := sc.Replicas(ctx, s.MasterName).Result()
			if err != nil || len(replicas) != 1 || replicas[0]["flags"] != "slave" || replicas[0]["master-link-status"] != "ok" {
				return false
			}
			others, err := sc.Sentinels(ctx, s.MasterName).Result()
			return err == nil && len(others) == n-1
		})
		sc.Close()
	}
	return s
}

// Failover asks the sentinel to promote the replica and waits until the
// sentinel names it as the master and it accepts writes.
func (s Sentinel) Failover(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr, MaxRetries: -1})
	defer sc.Close()
	if err := sc.Failover(ctx, s.MasterName).Err(); err != nil {
		t.Fatalf("SENTINEL FAILOVER: %v", err)
	}
	waitUntil(t, "the sentinel names the replica master", func() bool {
		addr, err := sc.GetMasterAddrByName(ctx, s.MasterName).Result()
		return err == nil && net.JoinHostPort(addr[0], addr[1]) == s.Replica
	})
	rdb := redis.NewClient(&redis.Options{Addr: s.Replica, MaxRetries: -1})
	defer rdb.Close()
	waitUntil(t, "the replica takes writes", func() bool {
		role, err := rdb.Do(ctx, "ROLE").Slice()
		return err == nil && len(role) > 0 && role[0] == "master"
	})
}
