// Build (GOPATH mode on Debian's golang-etcd-server-dev, no network; the
// directory is built by path, so it need not sit inside GOPATH):
//
//	cd /work/main && GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE=/tmp/peers/gocache GOFLAGS= \
//	  go build -o /tmp/peers/bench_peers_etcd ./bench/peers/etcd
//
// bench_peers_etcd is benchmark 10's driver for etcd 3.4 (bench/peers.sh runs
// it beside simba's, Curator's and Redis's drivers, which speak the same
// command line and print the same lines):
//
//	bench_peers_etcd MODE --endpoint http://127.0.0.1:PORT [--lease-s 5] [options]
//	MODE: cycles --clients N --locks L --seconds S [--warmup-s 1]
//	      handoff --handoffs K
//	      leader --name NAME
//	      hold --locks L
//
// Every client is a clientv3.Client of its own with a concurrency.Session of
// --lease-s seconds; locks are concurrency.Mutex, the leader an Election.
// leader and hold run until SIGTERM or the end of stdin.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/clientv3"
	"go.etcd.io/etcd/clientv3/concurrency"
)

type config struct {
	mode, endpoint, name      string
	leaseS, clients, locks, k int
	seconds, warmupS          float64
}

// client is one client of the store: its own connection and session.
type client struct {
	cli  *clientv3.Client
	sess *concurrency.Session
}

func open(c *config) *client {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{c.endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		fatal(err)
	}
	sess, err := concurrency.NewSession(cli, concurrency.WithTTL(c.leaseS))
	if err != nil {
		fatal(err)
	}
	return &client{cli, sess}
}

// close revokes the session's lease (dropping whatever it still holds).
func (c *client) close() {
	if err := c.sess.Close(); err != nil {
		fatal(err)
	}
	c.cli.Close()
}

func cycles(c *config) {
	clients := make([]*client, c.clients)
	mutexes := make([]*concurrency.Mutex, c.clients)
	for i := range clients {
		clients[i] = open(c)
		mutexes[i] = concurrency.NewMutex(clients[i].sess, "/bench/lock/"+strconv.Itoa(i%c.locks))
	}
	// All clients start together, once every session is up.
	start := time.Now().Add(100 * time.Millisecond)
	counted := start.Add(seconds(c.warmupS))
	end := counted.Add(seconds(c.seconds))
	samples := make([][]float64, c.clients)
	var wg sync.WaitGroup
	for i := range mutexes {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			time.Sleep(time.Until(start))
			ctx := context.Background()
			for t0 := time.Now(); t0.Before(end); t0 = time.Now() {
				if err := mutexes[i].Lock(ctx); err != nil {
					fatal(err)
				}
				if err := mutexes[i].Unlock(ctx); err != nil {
					fatal(err)
				}
				if !t0.Before(counted) {
					samples[i] = append(samples[i], micros(time.Since(t0)))
				}
			}
		}(i)
	}
	wg.Wait()
	var all []float64
	for _, s := range samples {
		all = append(all, s...)
	}
	if len(all) == 0 {
		fatal(fmt.Errorf("no cycle completed in %g s", c.seconds))
	}
	for _, cl := range clients {
		cl.close()
	}
	measured := end.Sub(counted).Seconds()
	sort.Float64s(all)
	print(struct {
		Mode       string  `json:"mode"`
		Clients    int     `json:"clients"`
		Locks      int     `json:"locks"`
		Seconds    float64 `json:"seconds"`
		Cycles     int     `json:"cycles"`
		CyclesPerS float64 `json:"cycles_per_s"`
		P50        float64 `json:"p50_us"`
		P99        float64 `json:"p99_us"`
	}{"cycles", c.clients, c.locks, measured, len(all), float64(len(all)) / measured,
		nearestRank(all, 50), nearestRank(all, 99)})
}

// handoff passes one lock back and forth between two clients. The waiter's
// Lock runs on a goroutine started before the holder's 20 ms wait, so it is
// parked on its watch when the holder stamps t0 and unlocks.
func handoff(c *config) {
	ab := []*client{open(c), open(c)}
	m := []*concurrency.Mutex{
		concurrency.NewMutex(ab[0].sess, "/bench/handoff"),
		concurrency.NewMutex(ab[1].sess, "/bench/handoff"),
	}
	ctx := context.Background()
	if err := m[0].Lock(ctx); err != nil {
		fatal(err)
	}
	type locked struct {
		t1  time.Time
		err error
	}
	samples := make([]float64, 0, c.k)
	holder, waiter := 0, 1
	for len(samples) < c.k {
		got := make(chan locked, 1)
		go func(w *concurrency.Mutex) {
			err := w.Lock(ctx)
			got <- locked{time.Now(), err}
		}(m[waiter])
		time.Sleep(20 * time.Millisecond)
		t0 := time.Now()
		if err := m[holder].Unlock(ctx); err != nil {
			fatal(err)
		}
		r := <-got
		if r.err != nil {
			fatal(r.err)
		}
		samples = append(samples, micros(r.t1.Sub(t0)))
		holder, waiter = waiter, holder
	}
	if err := m[holder].Unlock(ctx); err != nil {
		fatal(err)
	}
	ab[0].close()
	ab[1].close()
	sort.Float64s(samples)
	print(struct {
		Mode     string  `json:"mode"`
		Handoffs int     `json:"handoffs"`
		P50      float64 `json:"p50_us"`
		P99      float64 `json:"p99_us"`
		Max      float64 `json:"max_us"`
	}{"handoff", len(samples), nearestRank(samples, 50), nearestRank(samples, 99), samples[len(samples)-1]})
}

func leader(c *config) {
	stop := stopped()
	cl := open(c)
	pfx := "/bench/election/" + c.name
	e := concurrency.NewElection(cl.sess, pfx)
	// The lease is unique to this campaigner, so it makes a unique value.
	val := fmt.Sprintf("%d-%x", os.Getpid(), cl.sess.Lease())
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var campaignErr error
	go func() {
		defer close(done)
		campaignErr = e.Campaign(ctx, val)
	}()
	// "ready" only once our key is in the election (Campaign's first
	// request), so the harness never kills the leader before we queue.
	awaitKey(cl.cli, fmt.Sprintf("%s/%x", pfx, cl.sess.Lease()), done)
	fmt.Println("ready")
	select {
	case <-done:
		if campaignErr != nil {
			fatal(campaignErr)
		}
		fmt.Println("elected")
		select {
		case <-stop:
		case <-cl.sess.Done():
			fatal(fmt.Errorf("session lost while leading"))
		}
	case <-stop:
		// Campaign deletes our key itself when its context is cancelled.
		cancel()
		<-done
	case <-cl.sess.Done():
		fatal(fmt.Errorf("session lost while campaigning"))
	}
	cancel()
	rctx, rcancel := context.WithTimeout(context.Background(), seconds(float64(c.leaseS)))
	defer rcancel()
	if err := e.Resign(rctx); err != nil {
		fatal(err)
	}
	cl.close()
}

// awaitKey polls until key exists or done closes.
func awaitKey(cli *clientv3.Client, key string, done <-chan struct{}) {
	for {
		resp, err := cli.Get(context.Background(), key, clientv3.WithCountOnly())
		if err != nil {
			fatal(err)
		}
		if resp.Count > 0 {
			return
		}
		select {
		case <-done:
			return
		case <-time.After(2 * time.Millisecond):
		}
	}
}

func hold(c *config) {
	stop := stopped()
	cl := open(c)
	ctx := context.Background()
	held := make([]*concurrency.Mutex, c.locks)
	t0 := time.Now()
	for i := range held {
		held[i] = concurrency.NewMutex(cl.sess, "/bench/hold/"+strconv.Itoa(i))
		if err := held[i].Lock(ctx); err != nil {
			fatal(err)
		}
	}
	print(struct {
		Mode  string  `json:"mode"`
		Locks int     `json:"locks"`
		TakeS float64 `json:"take_s"`
	}{"hold", c.locks, time.Since(t0).Seconds()})
	select {
	case <-stop:
	case <-cl.sess.Done():
		fatal(fmt.Errorf("session lost while holding"))
	}
	t0 = time.Now()
	for _, m := range held {
		if err := m.Unlock(ctx); err != nil {
			fatal(err)
		}
	}
	release := time.Since(t0).Seconds()
	cl.close()
	print(struct {
		Mode     string  `json:"mode"`
		Locks    int     `json:"locks"`
		ReleaseS float64 `json:"release_s"`
	}{"released", c.locks, release})
}

// stopped closes its channel on SIGTERM (or SIGINT) or at stdin's end. The
// signals are caught from the call on, so call it before any slow start.
func stopped() <-chan struct{} {
	stop := make(chan struct{})
	var once sync.Once
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-sig
		once.Do(func() { close(stop) })
	}()
	go func() {
		io.Copy(io.Discard, os.Stdin)
		once.Do(func() { close(stop) })
	}()
	return stop
}

// nearestRank takes sorted, non-empty samples.
func nearestRank(sorted []float64, p float64) float64 {
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	if rank < 1 {
		rank = 1
	}
	return sorted[rank-1]
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

func print(v interface{}) {
	b, err := json.Marshal(v)
	if err != nil {
		fatal(err)
	}
	os.Stdout.Write(append(b, '\n'))
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "bench_peers_etcd:", err)
	os.Exit(1)
}

func parse() *config {
	c := &config{}
	fs := flag.NewFlagSet("bench_peers_etcd", flag.ExitOnError)
	fs.StringVar(&c.endpoint, "endpoint", "", "etcd client URL, e.g. http://127.0.0.1:2379 (required)")
	fs.IntVar(&c.leaseS, "lease-s", 5, "session TTL, seconds")
	fs.IntVar(&c.clients, "clients", 1, "cycles: clients")
	fs.IntVar(&c.locks, "locks", 1, "cycles: locks shared out; hold: locks held")
	fs.Float64Var(&c.seconds, "seconds", 5, "cycles: seconds counted")
	fs.Float64Var(&c.warmupS, "warmup-s", 1, "cycles: seconds before counting")
	fs.IntVar(&c.k, "handoffs", 200, "handoff: samples")
	fs.StringVar(&c.name, "name", "bench", "leader: the election")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: bench_peers_etcd cycles|handoff|leader|hold --endpoint URL [--lease-s 5] [options]")
		fs.PrintDefaults()
	}
	if len(os.Args) < 2 {
		usage(fs, "no mode")
	}
	c.mode = os.Args[1]
	fs.Parse(os.Args[2:])
	switch {
	case c.mode != "cycles" && c.mode != "handoff" && c.mode != "leader" && c.mode != "hold":
		usage(fs, "unknown mode "+strconv.Quote(c.mode))
	case fs.NArg() > 0:
		usage(fs, "unexpected argument "+strconv.Quote(fs.Arg(0)))
	case c.endpoint == "":
		usage(fs, "--endpoint is required")
	case c.leaseS < 1 || c.clients < 1 || c.locks < 1 || c.k < 1:
		usage(fs, "--lease-s, --clients, --locks and --handoffs must be at least 1")
	case !(c.seconds > 0) || !(c.warmupS >= 0):
		usage(fs, "--seconds must be positive, --warmup-s not negative")
	}
	return c
}

func usage(fs *flag.FlagSet, why string) {
	fmt.Fprintln(fs.Output(), why)
	fs.Usage()
	os.Exit(2)
}

func main() {
	c := parse()
	switch c.mode {
	case "cycles":
		cycles(c)
	case "handoff":
		handoff(c)
	case "leader":
		leader(c)
	case "hold":
		hold(c)
	}
}
